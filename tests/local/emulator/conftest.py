"""Clients of the emulator the module's tests share (`aws_client`: tests/local/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient
    from mypy_boto3_kinesis import KinesisClient

AwsClientFactory = Callable[[str], Any]


@pytest.fixture(scope="module")
def dynamodb(aws_client: AwsClientFactory) -> DynamoDBClient:
    client: DynamoDBClient = aws_client("dynamodb")
    return client


@pytest.fixture(scope="module")
def streams(aws_client: AwsClientFactory) -> DynamoDBStreamsClient:
    client: DynamoDBStreamsClient = aws_client("dynamodbstreams")
    return client


@pytest.fixture(scope="module")
def kinesis(aws_client: AwsClientFactory) -> KinesisClient:
    client: KinesisClient = aws_client("kinesis")
    return client
