"""The functions' SDK clients: what is set once per client, and which requests go unvalidated."""

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.exceptions import ParamValidationError

from function_support import aws


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    settings = {
        "AWS_ENDPOINT_URL": "https://dynamodb.test.invalid",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
    }
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    aws.dynamodb_client.cache_clear()
    aws.state_update_client.cache_clear()
    aws.prevalidated_write_client.cache_clear()
    yield
    aws.dynamodb_client.cache_clear()
    aws.state_update_client.cache_clear()
    aws.prevalidated_write_client.cache_clear()


class _Body:
    def stream(self, **_: Any) -> Iterator[bytes]:
        yield b"{}"


class Headers:
    """Answers every request with an empty 200 and keeps the headers it was sent with."""

    def __init__(self) -> None:
        self.sent: list[dict[str, str]] = []

    def __call__(self, request: Any, **_: Any) -> AWSResponse:
        self.sent.append({k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()})
        headers = HTTPHeaders()
        headers["content-type"] = "application/x-amz-json-1.0"
        return AWSResponse(request.url, 200, headers, _Body())


def test_only_the_state_updates_and_reduce_transactions_skip_parameter_validation(clients: None) -> None:
    """Only the state function's writes (`state_update_client`) and the reduce function's transactions
    (`prevalidated_write_client`) are validated before they are built, not by botocore."""
    malformed: dict[str, Any] = {"TableName": "t", "Key": {"TradeID": {"S": 5}}}
    with pytest.raises(ParamValidationError):
        aws.dynamodb_client().update_item(**malformed)
    for unvalidated in (aws.state_update_client, aws.prevalidated_write_client):
        client: Any = unvalidated()
        headers = Headers()
        client.meta.events.register("before-send.dynamodb", headers)
        client.update_item(**malformed)  # sent as it is: DynamoDB, not botocore, would refuse it
        assert len(headers.sent) == 1, unvalidated.__name__


def test_every_request_carries_the_user_agent_built_once(clients: None) -> None:
    headers = Headers()
    both: list[Any] = [aws.dynamodb_client(), aws.state_update_client()]
    for client in both:
        client.meta.events.register("before-send.dynamodb", headers)
        client.update_item(TableName="t", Key={"TradeID": {"S": "a"}})
    agents = [sent["User-Agent"] for sent in headers.sent]
    assert len(agents) == 2
    assert all(agent.startswith(aws.USER_AGENT) for agent in agents), "what is set once (extras may follow)"
