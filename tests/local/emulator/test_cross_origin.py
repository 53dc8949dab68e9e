"""Issue 26, item 9: the emulator answers this machine's clients, never another site's page.

A web page in the user's browser that finds the emulator's port must not create tables or
write records: a preflight from another origin is refused and not echoed back, a request
whose ``Host`` is a rebound DNS name is refused, and boto3 clients work as before.
"""

from __future__ import annotations

import http.client
import json
import uuid
from urllib.parse import urlsplit

import boto3
import pytest

from local.emulator.control import EmulatorProcess

CREATE_TABLE = "DynamoDB_20120810.CreateTable"


def send(
    emulator: EmulatorProcess, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    address = urlsplit(emulator.endpoint_url)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=10)
    connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    for name, value in {"Content-Length": str(len(body)), **headers}.items():
        connection.putheader(name, value)
    connection.endheaders(body)
    response = connection.getresponse()
    answer = response.status, {name.lower(): value for name, value in response.getheaders()}, response.read()
    connection.close()
    return answer


def create_table_request(table: str) -> tuple[dict[str, str], bytes]:
    """A CreateTable as a page's script would send it (no signature: the emulator checks none)."""
    body = {
        "TableName": table,
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
        "BillingMode": "PAY_PER_REQUEST",
    }
    headers = {
        "X-Amz-Target": CREATE_TABLE,
        "Content-Type": "application/x-amz-json-1.0",
        "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20261125/us-east-1/dynamodb/aws4_request",
    }
    return headers, json.dumps(body).encode()


def session() -> boto3.session.Session:
    return boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1")


def table_names(emulator: EmulatorProcess) -> list[str]:
    client = session().client("dynamodb", endpoint_url=emulator.endpoint_url)
    return list(client.list_tables()["TableNames"])


@pytest.fixture
def own_host(emulator: EmulatorProcess) -> str:
    return str(urlsplit(emulator.endpoint_url).netloc)


def test_a_preflight_from_another_origin_is_refused_and_not_echoed(emulator: EmulatorProcess, own_host: str) -> None:
    status, headers, _ = send(
        emulator,
        "OPTIONS",
        "/",
        {
            "Host": own_host,
            "Origin": "http://attacker.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,x-amz-target",
            "Sec-Fetch-Site": "cross-site",
            "Sec-Fetch-Mode": "cors",
        },
    )
    assert status == 403
    assert not [name for name in headers if name.startswith("access-control-")]


def test_moto_s_global_cors_is_off_even_for_the_emulator_s_own_origin(emulator: EmulatorProcess, own_host: str) -> None:
    """The one origin the middleware lets through (the emulator's own page, e.g. moto's
    dashboard) reaches moto, which no longer echoes it (flask-cors echoed it on every answer)."""
    status, headers, _ = send(
        emulator,
        "OPTIONS",
        "/",
        {"Host": own_host, "Origin": f"http://{own_host}", "Access-Control-Request-Method": "PUT"},
    )
    assert status == 200
    assert not [name for name in headers if name.startswith("access-control-")]
    request, _ = create_table_request("unused")
    listing = {**request, "X-Amz-Target": "DynamoDB_20120810.ListTables"}
    status, headers, _ = send(
        emulator, "POST", "/", {"Host": own_host, "Origin": f"http://{own_host}", **listing}, b"{}"
    )
    assert status == 200
    assert not [name for name in headers if name.startswith("access-control-")]


@pytest.mark.parametrize(
    "extra",
    [
        {"Origin": "http://attacker.example"},  # a cross-origin fetch
        {"Origin": "null"},  # a sandboxed frame or a data: URL
        {"Sec-Fetch-Site": "cross-site"},  # a no-cors request: no Origin, but the browser says where from
        {"Sec-Fetch-Site": "same-site"},  # another port on localhost
    ],
)
def test_a_cross_origin_write_is_refused(emulator: EmulatorProcess, own_host: str, extra: dict[str, str]) -> None:
    table = f"cross-origin-{uuid.uuid4().hex[:8]}"
    headers, body = create_table_request(table)
    status, _, _ = send(emulator, "POST", "/", {"Host": own_host, **headers, **extra}, body)
    assert status == 403
    assert table not in table_names(emulator)


@pytest.mark.parametrize("host", ["rebind.example", "rebind.example:{port}", "127.0.0.1.nip.io:{port}", "127.0.0.1:1"])
def test_a_request_for_another_host_name_is_refused(emulator: EmulatorProcess, host: str) -> None:
    """DNS rebinding: the page's own name (or another port) in Host, though the socket is the emulator's."""
    table = f"rebound-{uuid.uuid4().hex[:8]}"
    headers, body = create_table_request(table)
    port = urlsplit(emulator.endpoint_url).port
    status, _, reply = send(emulator, "POST", "/", {"Host": host.format(port=port), **headers}, body)
    assert (status, reply) == (421, b"unexpected Host header\n")
    assert table not in table_names(emulator)


@pytest.mark.parametrize("name", ["localhost", "127.0.0.1", "[::1]", "LOCALHOST"])
def test_every_loopback_name_with_the_port_is_served(emulator: EmulatorProcess, name: str) -> None:
    port = urlsplit(emulator.endpoint_url).port
    status, _, body = send(emulator, "GET", "/_compat/health", {"Host": f"{name}:{port}"})
    assert status == 200 and json.loads(body)["status"] == "ok"


def test_boto3_clients_still_work(emulator: EmulatorProcess) -> None:
    aws = session()
    table = f"boto3-{uuid.uuid4().hex[:8]}"
    dynamodb = aws.client("dynamodb", endpoint_url=emulator.endpoint_url)
    dynamodb.create_table(**json.loads(create_table_request(table)[1]))
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "a"}})
    assert dynamodb.get_item(TableName=table, Key={"pk": {"S": "a"}})["Item"] == {"pk": {"S": "a"}}
    s3 = aws.client("s3", endpoint_url=emulator.endpoint_url)
    s3.create_bucket(Bucket=table)
    s3.put_object(Bucket=table, Key="deltas/x.json", Body=b"{}")
    assert s3.get_object(Bucket=table, Key="deltas/x.json")["Body"].read() == b"{}"
    kinesis = aws.client("kinesis", endpoint_url=emulator.endpoint_url)
    kinesis.create_stream(StreamName=table, ShardCount=1)
    assert kinesis.describe_stream_summary(StreamName=table)["StreamDescriptionSummary"]["StreamName"] == table
