"""Every delta-item put the map function sends passes botocore's parameter validation.

The map function sends its `put_item` through a client with botocore's parameter validation off
(`function_support.aws.prevalidated_write_client`). This is where that validation runs instead:
`validate_parameters`, the very check the option skips, over `delta_item_put` of the encoding of
arbitrary delta items (any stream position, node keys, storable values, counts and timestamps).
The request's shape is fixed by `delta_item_put` and `encode_delta_item`, so nothing left
unvalidated depends on anything not generated here.
"""

from __future__ import annotations

import botocore.session
import pytest
from botocore.exceptions import ParamValidationError
from botocore.model import StructureShape
from botocore.validate import validate_parameters
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregation.delta_items import DeltaItem, encode_delta_item
from map_function.handler import delta_item_put
from tests.lambdas.delta_strategies import delta_items

_PUT_INPUT = botocore.session.get_session().get_service_model("dynamodb").operation_model("PutItem").input_shape
assert _PUT_INPUT is not None
PUT_INPUT: StructureShape = _PUT_INPUT
LAMBDA_REQUEST_IDS = st.uuids().map(str)


@settings(max_examples=40, deadline=None)
@given(delta_items(), st.text(min_size=1, max_size=255), LAMBDA_REQUEST_IDS)
def test_every_delta_item_put_passes_botocores_validation(item: DeltaItem, table: str, request_id: str) -> None:
    validate_parameters(delta_item_put(table, encode_delta_item(item), request_id), PUT_INPUT)


@given(delta_items())
@settings(max_examples=5, deadline=None)
def test_the_validation_run_here_refuses_a_malformed_put(item: DeltaItem) -> None:
    """The check above can fail: an attribute of the wrong type is refused."""
    request = delta_item_put("delta", encode_delta_item(item), "request")
    request["Item"]["RecordCount"] = {"N": item.batch.record_count}
    with pytest.raises(ParamValidationError):
        validate_parameters(request, PUT_INPUT)
