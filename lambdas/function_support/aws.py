"""AWS clients, created once per execution environment and reused across invocations.

Created lazily rather than at import so tests and the local runtime can point
them at the emulator (`AWS_ENDPOINT_URL`) before first use. The SDK's standard
retry mode retries throttling and transient errors with backoff; each write is
idempotent, so a retried request whose first response was lost is harmless.
"""

import platform
from functools import cache
from typing import TYPE_CHECKING

import boto3
import botocore
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.config import Config
from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_s3.client import S3Client

# The pool is a cap, opened lazily: as large as the widest writer pool a function may be
# configured with (`stateWriteConcurrency` goes up to 256), so no concurrent write waits
# for, or throws away, a connection. `total_max_attempts` counts the first attempt too.
MAX_CONCURRENT_REQUESTS = 256
USER_AGENT = f"exactly-once-aggregation Botocore/{botocore.__version__} Python/{platform.python_version()}"
"""Set once (`Config(user_agent=...)`, documented): by default botocore rebuilds and sanitises its
User-Agent from a dozen components on every request, about 40 µs each, which is a sixth of the
state function's CPU per record (docs/benchmarks.md, section 3). The header is informational."""
SDK_CONFIG = Config(
    retries={"mode": "standard", "total_max_attempts": 8},
    connect_timeout=5,
    read_timeout=10,
    max_pool_connections=MAX_CONCURRENT_REQUESTS,
    user_agent=USER_AGENT,
)

serializer = TypeSerializer()
deserializer = TypeDeserializer()


@cache
def dynamodb_client() -> "DynamoDBClient":
    return boto3.client("dynamodb", config=SDK_CONFIG)


@cache
def state_update_client() -> "DynamoDBClient":
    """The state function's `batch_execute_statement` calls, sent without botocore's parameter validation.

    Safe because every statement is validated before it exists: `state_write_values` builds its
    parameters at the door, their shape fixed and every value what boto3's `TypeSerializer` makes of
    it or a string, and `tests/lambdas/test_door_properties.py` runs botocore's own
    `validate_parameters` (what this option turns off, the same check) over the statements it builds
    from edge-case records; the quarantine's inserts likewise (`state_function.quarantine`,
    validated over hostile records in `tests/lambdas/state_function/test_quarantine.py`).
    Validation is about as costly as serialisation itself, per value. Every other request keeps
    `dynamodb_client`, validated, save the writes of `prevalidated_write_client`.
    """
    return _client_without_parameter_validation()


@cache
def prevalidated_write_client() -> "DynamoDBClient":
    """The reduce function's `transact_write_items` and the map function's delta-item `put_item`,
    sent without botocore's parameter validation.

    Safe for the same reason as `state_update_client`: every request is one fixed shape filled
    with strings and with numbers boto3's `TypeSerializer` or `aggregation.exact` made
    (`reduce_function.handler.transaction_items`, `map_function.handler.delta_item_put`), and
    tests run botocore's own `validate_parameters` over the requests built from arbitrary inputs
    (`tests/lambdas/reduce_function/test_transaction_requests.py`: transactions planned from
    arbitrary delta items, in every mode and slice count; `tests/lambdas/map_function/
    test_put_requests.py`: arbitrary delta items). DynamoDB validates each request again on its
    side. Validation cost more per transaction action, or per delta-item attribute, than
    serialising it (issue 37).
    """
    return _client_without_parameter_validation()


def _client_without_parameter_validation() -> "DynamoDBClient":
    """Read `SDK_CONFIG` at each creation, so that a test changing it changes these clients too."""
    return boto3.client("dynamodb", config=SDK_CONFIG.merge(Config(parameter_validation=False)))


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


@cache
def s3_client() -> "S3Client":
    """S3 for the archive. Conditional writes are never retried blindly by our own code: the
    SDK's retries of a lost response come back as 412 and are settled by a redrive."""
    return boto3.client("s3", config=SDK_CONFIG)
