"""What the suite's AWS-facing tests share besides fixtures: dummy credentials, the repository root."""

from pathlib import Path

DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def repository_root() -> Path:
    return Path(__file__).resolve().parents[1]
