"""Fixtures for the dashboard tests: a real moto server, an AggregateTable in it, running dashboards."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import pytest
from moto.server import ThreadedMotoServer
from playwright.sync_api import Browser, sync_playwright

from tests.frontend.dashboard_helpers import DashboardLauncher

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import DynamoDBServiceResource, Table

REGION = "us-east-1"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGUMENTS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A moto server on a free loopback port, shared by the session (each test makes its own table)."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one access-log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def dynamodb(moto_endpoint: str) -> DynamoDBServiceResource:
    """A DynamoDB resource on the moto server, with dummy credentials."""
    session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION)
    return session.resource("dynamodb", endpoint_url=moto_endpoint)


@pytest.fixture
def aggregate_table(dynamodb: DynamoDBServiceResource) -> Iterator[Table]:
    """An empty AggregateTable (schema of docs/architecture.md) with a unique name."""
    table = dynamodb.create_table(
        TableName=f"AggregateTable-{uuid.uuid4().hex[:12]}",
        KeySchema=[{"AttributeName": "AggregateKey", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "AggregateKey", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    yield table
    table.delete()


@pytest.fixture
def dashboards(dynamodb: DynamoDBServiceResource) -> Iterator[DashboardLauncher]:
    """Starts dashboards on the moto server; stops them all when the test ends."""
    launcher = DashboardLauncher(dynamodb)
    yield launcher
    for dashboard in launcher.running:
        dashboard.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless (never a downloaded browser)."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the browser tests need Debian's chromium package "
            "(.ci/run installs it: apt-get install -y chromium)"
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGUMENTS)
        yield launched
        launched.close()
