"""Every transaction the reduce function sends passes botocore's parameter validation.

The reduce function sends its `transact_write_items` through a client with botocore's parameter
validation off (`function_support.aws.prevalidated_write_client`). This is where that validation
runs instead: `validate_parameters`, the very check the option skips, over the requests
`transaction_items` builds from transactions planned out of arbitrary delta items (any node keys,
any values of the widest value domains and any counts, many items, every mode and slice count).
The request's shape is fixed by `transaction_items`, so nothing left unvalidated depends on
anything not generated here.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import botocore.session
import pytest
from botocore.exceptions import ParamValidationError
from botocore.model import StructureShape
from botocore.validate import validate_parameters
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregation.deltas import NodeDelta
from aggregation.transactions import MAX_TRANSACTION_ACTIONS, DeltaBatch, plan_transactions, split_into_units
from reduce_function.handler import IdempotencyMode, transaction_items
from tests.lambdas.delta_strategies import node_deltas, summable_numbers

_TRANSACTION_INPUT = (
    botocore.session.get_session().get_service_model("dynamodb").operation_model("TransactWriteItems").input_shape
)
assert _TRANSACTION_INPUT is not None
TRANSACTION_INPUT: StructureShape = _TRANSACTION_INPUT

delta_batches = st.builds(
    DeltaBatch,
    batch_hash=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
    deltas=node_deltas(summable_numbers()),
    record_count=st.integers(min_value=0, max_value=10_000),
    producer_timestamps=st.just(()),
    created_at=st.integers(min_value=0, max_value=4_102_444_800),
)


def request_of(items: list[dict[str, Any]], token: str) -> dict[str, Any]:
    return {"TransactItems": items, "ClientRequestToken": token}


@settings(max_examples=40, deadline=None)
@given(
    st.lists(delta_batches, min_size=1, max_size=6),
    st.sampled_from([IdempotencyMode.TOKEN_AND_MARKERS, IdempotencyMode.TOKEN_ONLY]),
    st.integers(min_value=1, max_value=64),
    st.text(min_size=1, max_size=255),
    st.integers(min_value=2 * 86_400, max_value=400 * 86_400),
)
def test_every_planned_transaction_passes_botocores_validation(
    batches: list[DeltaBatch], mode: IdempotencyMode, slices: int, table: str, marker_ttl: int
) -> None:
    units = [
        unit for index, batch in enumerate(batches) for unit in split_into_units(batch, aggregate_slice=index % slices)
    ]
    plans = plan_transactions(units, mode is IdempotencyMode.TOKEN_AND_MARKERS, slices)
    assert plans
    for plan in plans:
        items = transaction_items(plan, table, mode, marker_ttl)
        assert len(items) <= MAX_TRANSACTION_ACTIONS
        validate_parameters(request_of(items, plan.client_request_token), TRANSACTION_INPUT)


def test_the_validation_run_here_refuses_a_malformed_transaction() -> None:
    """The check above can fail: a value of the wrong type is refused."""
    batch = DeltaBatch("0" * 64, {"A": NodeDelta(Decimal("1.5"), 1)}, 1, (), 1_700_000_000)
    (plan,) = plan_transactions(split_into_units(batch), True, 1)
    items = transaction_items(plan, "aggregate", IdempotencyMode.TOKEN_AND_MARKERS, 7 * 86_400)
    items[0]["Update"]["ExpressionAttributeValues"][":count"] = {"N": 1}
    with pytest.raises(ParamValidationError):
        validate_parameters(request_of(items, plan.client_request_token), TRANSACTION_INPUT)
