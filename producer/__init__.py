"""Load generator, ground-truth ledger and exactly-once verifier (``python -m producer``).

The Python API, for in-process callers such as ``python -m local demo``::

    from producer import SendOptions, clear_pipeline, resolve_target, send_messages, verify_pipeline

    target = resolve_target()                      # --stack-name / .local/outputs.json
    summary = send_messages(target, SendOptions(count=2000, seed=7))
    report = verify_pipeline(target, timeout=120)  # report.exact
"""

from producer.cleanup import ClearSummary, ClearTimeout, clear_pipeline
from producer.generator import GeneratedMessage, GeneratorConfig, MessageGenerator, MessageKind
from producer.ledger import Ledger, compute_aggregates
from producer.model import AggregateNode, TradeState
from producer.sender import RetryPolicy, SendError, SendOptions, SendSummary, send_messages
from producer.targets import resolve_target
from producer.verifier import (
    AggregateComparison,
    NodeMismatch,
    TradeMismatch,
    VerificationReport,
    compare_aggregates,
    compare_trades,
    verify_pipeline,
)
from toolkit.ledger import DEFAULT_LEDGER_PATH, LedgerError
from toolkit.pipeline import PipelineTarget, TargetError

__all__ = [
    "DEFAULT_LEDGER_PATH",
    "AggregateComparison",
    "AggregateNode",
    "ClearSummary",
    "ClearTimeout",
    "GeneratedMessage",
    "GeneratorConfig",
    "Ledger",
    "LedgerError",
    "MessageGenerator",
    "MessageKind",
    "NodeMismatch",
    "PipelineTarget",
    "RetryPolicy",
    "SendError",
    "SendOptions",
    "SendSummary",
    "TargetError",
    "TradeMismatch",
    "TradeState",
    "VerificationReport",
    "clear_pipeline",
    "compare_aggregates",
    "compare_trades",
    "compute_aggregates",
    "resolve_target",
    "send_messages",
    "verify_pipeline",
]
