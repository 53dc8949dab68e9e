"""Wire discovery, invokers and pollers together for one deployment; run until stopped.

`make up` starts this as a detached process (`python -m local.runner --state-dir .local`);
tests use `Runner` in-process. Either way it reads the deployment the deployer recorded
(`.local/deployment.json`), asks the emulated Lambda service what to run, and keeps
`.local/checkpoints.json` and `.local/runner-stats.json` up to date.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

from local.deploy.deployer import Deployment, aws_client
from local.paths import LocalPaths
from local.runner.checkpoints import CheckpointStore
from local.runner.discovery import MappingConfig, discover_mappings, fetch_function
from local.runner.execution_environment import InvocationResult
from local.runner.expiry import OnFailureDestination
from local.runner.invoker import (
    FunctionInvoker,
    assume_execution_role,
    fault_injection_overrides,
    function_environment,
)
from local.runner.lanes import Invoke
from local.runner.pollers import (
    DEFAULT_POLL_INTERVAL_SECONDS,
    DynamoDBShardReader,
    KinesisShardReader,
    ShardPoller,
    ShardReader,
)
from local.runner.redelivery import RedeliveryPolicy
from local.runner.stats import RunnerStats

log = logging.getLogger(__name__)

SHARD_DISCOVERY_INTERVAL_SECONDS = 5.0
STATS_INTERVAL_SECONDS = 1.0
MINIMUM_RECORD_AGE_SECONDS = 60
"""The least MaximumRecordAgeInSeconds Lambda accepts besides -1 (Lambda API Reference, MaximumRecordAgeInSeconds:
"The minimum valid value for maximum record age is 60s"); a smaller one deployed to the emulator (a test's) is
honoured."""


class Runner:
    def __init__(
        self,
        deployment: Deployment,
        paths: LocalPaths,
        *,
        poll_interval_seconds: float = DEFAULT_POLL_INTERVAL_SECONDS,
        caller_environment: Mapping[str, str] | None = None,
        worker_log: IO[bytes] | None = None,
    ) -> None:
        self.deployment = deployment
        self.paths = paths
        self.poll_interval_seconds = poll_interval_seconds
        environ = os.environ if caller_environment is None else caller_environment
        self.overrides = fault_injection_overrides(environ)
        self.redelivery = RedeliveryPolicy.from_environment(environ)
        self.worker_log = worker_log
        self.stop_event = threading.Event()
        self.stats = RunnerStats(paths.runner_stats)
        self.stats.fault_injection = dict(self.overrides)
        self.checkpoints = CheckpointStore(paths.checkpoints)
        self.invokers: dict[str, FunctionInvoker] = {}
        self.mappings: list[MappingConfig] = []
        self.pollers: dict[str, ShardPoller] = {}
        self._readers: dict[str, ShardReader] = {}
        self._destinations: dict[str, OnFailureDestination | None] = {}
        self._background: list[threading.Thread] = []

    # ----------------------------------------------------------- start-up

    def start(self) -> None:
        """Discover, warm every function, fix every shard's starting iterator, start polling."""
        self.paths.ensure()
        self.mappings = [m for m in discover_mappings(self.deployment) if m.enabled]
        if self.overrides:
            log.info("fault injection from the caller's environment: %s", self.overrides)
        if self.redelivery is not None and self.redelivery.services:
            log.info("retries of %s re-delivered in other boundaries", ", ".join(sorted(self.redelivery.services)))
        if self.redelivery is not None and self.redelivery.again_after_success_pct:
            log.info("%g %% of successful batches delivered again", self.redelivery.again_after_success_pct)
        for mapping in self.mappings:
            log.info(
                "mapping %s -> %s: batch %d, window %.1fs, start %s, retries %d, record age %d s, bisect %s, "
                "item failures %s, filters %s, parallelization %d, on failure %s; field sources %s",
                mapping.event_source_arn,
                mapping.function_name,
                mapping.batch_size,
                mapping.maximum_batching_window_seconds,
                mapping.starting_position,
                mapping.maximum_retry_attempts,
                mapping.maximum_record_age_seconds,
                mapping.bisect_batch_on_function_error,
                mapping.report_batch_item_failures,
                list(mapping.filter_patterns),
                mapping.parallelization_factor,
                mapping.on_failure_destination or "nothing",
                dict(mapping.field_sources),
            )
            if 0 <= mapping.maximum_record_age_seconds < MINIMUM_RECORD_AGE_SECONDS:
                log.warning(
                    "%s: MaximumRecordAgeInSeconds %d is honoured locally; Lambda accepts -1 or %d to 604,800 only",
                    mapping.function_name,
                    mapping.maximum_record_age_seconds,
                    MINIMUM_RECORD_AGE_SECONDS,
                )
            self._destinations[mapping.uuid] = self._destination_for(mapping)
            if mapping.parallelization_factor > 1 and mapping.tumbling_window_seconds > 0:
                log.warning(
                    "%s: ParallelizationFactor %d with a tumbling window runs one lane per shard locally "
                    "(the window's state is the shard's)",
                    mapping.function_name,
                    mapping.parallelization_factor,
                )
            if mapping.function_name not in self.invokers:
                self.invokers[mapping.function_name] = self._invoker_for(mapping.function_name)
        self._warm_up(list(self.invokers.values()))
        for mapping in self.mappings:
            self._readers[mapping.uuid] = self._reader_for(mapping)
            self._start_new_shards(mapping)
        self._spawn(self._discover_shards_forever, "shard-discovery")
        self._spawn(self._write_stats_forever, "stats-writer")
        with self.stats.lock:
            self.stats.ready = True
        self.stats.write()
        log.info(
            "runner ready: %d function(s), %d mapping(s), %d shard poller(s)",
            len(self.invokers),
            len(self.mappings),
            len(self.pollers),
        )

    def _invoker_for(self, function_name: str) -> FunctionInvoker:
        function = fetch_function(self.deployment, function_name, self.paths.functions_dir)
        environment = function_environment(
            function,
            endpoint_url=self.deployment.endpoint_url,
            region=self.deployment.region,
            overrides=self.overrides,
            credentials=assume_execution_role(
                aws_client("sts", self.deployment.endpoint_url, self.deployment.region), function
            ),
        )
        invoker = FunctionInvoker(function, environment=environment, stats=self.stats, log_file=self.worker_log)
        self.stats.function(function_name)
        log.info(
            "function %s: handler %s, timeout %ds, reserved concurrency %s, code %s",
            function.name,
            function.handler,
            function.timeout_seconds,
            function.reserved_concurrency,
            function.code_dir,
        )
        return invoker

    @staticmethod
    def _warm_up(invokers: list[FunctionInvoker]) -> None:
        """One warm execution environment of every function, all at once: each is a process of its own
        whose Init (the handler's import) costs about half a second of CPU, so on two cores the four
        overlap instead of keeping `make up` (and every runner restart) waiting for each in turn."""
        with ThreadPoolExecutor(max_workers=max(1, len(invokers)), thread_name_prefix="warm-up") as pool:
            for started in [pool.submit(invoker.warm_up) for invoker in invokers]:
                started.result()

    def _redelivery_for(self, function_name: str) -> RedeliveryPolicy | None:
        """What of the redelivery policy applies to this function: reshaped retries if it names the
        function's service, duplicates after success for every function."""
        service = self.invokers[function_name].function.environment.get("POWERTOOLS_SERVICE_NAME", "")
        return None if self.redelivery is None else self.redelivery.for_service(service)

    def _reader_for(self, mapping: MappingConfig) -> ShardReader:
        endpoint, region = self.deployment.endpoint_url, self.deployment.region
        if mapping.source_kind == "kinesis":
            return KinesisShardReader(aws_client("kinesis", endpoint, region), mapping.event_source_arn, region)
        return DynamoDBShardReader(aws_client("dynamodbstreams", endpoint, region), mapping.event_source_arn, region)

    def _destination_for(self, mapping: MappingConfig) -> OnFailureDestination | None:
        """The mapping's on-failure destination, with clients of the emulator; None without one."""
        if mapping.on_failure_destination is None:
            return None
        endpoint, region = self.deployment.endpoint_url, self.deployment.region
        return OnFailureDestination(
            mapping.on_failure_destination, lambda service: aws_client(service, endpoint, region)
        )

    def _start_new_shards(self, mapping: MappingConfig) -> None:
        """Start a poller for every shard not yet polled whose parent (if polled) is done."""
        for shard_id, parent_id in self._readers[mapping.uuid].list_shards():
            key = f"{mapping.uuid}/{shard_id}"
            if key in self.pollers:
                continue
            parent = self.pollers.get(f"{mapping.uuid}/{parent_id}") if parent_id else None
            if parent is not None and not parent.finished:
                continue  # a child shard starts after its parent, preserving order per key
            poller = ShardPoller(
                mapping=mapping,
                shard_id=shard_id,
                reader=self._readers[mapping.uuid],
                invoke=self._invoke_then_wake(mapping.function_name),
                checkpoints=self.checkpoints,
                stats=self.stats,
                stop=self.stop_event,
                poll_interval_seconds=self.poll_interval_seconds,
                redelivery=self._redelivery_for(mapping.function_name),
                on_failure_destination=self._destinations.get(mapping.uuid),
            )
            poller.prepare()
            self.pollers[key] = poller
            poller.start()

    def _invoke_then_wake(self, function_name: str) -> Invoke:
        """Invoke the function, then wake the pollers of every stream it may just have written to.

        A function learns the tables and streams it writes to from its environment (the stack
        passes their names, as `STATE_TABLE` or `DELTA_TABLE`), so the pollers whose source is
        named there are woken: the next stage reads the new records at once instead of after
        its pause. A wrong guess costs one empty read, a missed one only the pause; delivery
        is the same either way. Failed invocations wake too: a write may precede the failure.
        """
        invoker = self.invokers[function_name]
        names = frozenset(invoker.function.environment.values())

        def invoke(event: Mapping[str, Any]) -> InvocationResult:
            try:
                return invoker.invoke(event)
            finally:
                for poller in list(self.pollers.values()):
                    if poller.source_name in names:
                        poller.wake()

        return invoke

    # --------------------------------------------------------- background

    def _spawn(self, target: object, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)  # type: ignore[arg-type]
        self._background.append(thread)
        thread.start()

    def _discover_shards_forever(self) -> None:
        while not self.stop_event.wait(SHARD_DISCOVERY_INTERVAL_SECONDS):
            for mapping in self.mappings:
                try:
                    self._start_new_shards(mapping)
                except Exception:
                    log.exception("shard discovery failed for %s", mapping.event_source_arn)

    def _write_stats_forever(self) -> None:
        while not self.stop_event.wait(STATS_INTERVAL_SECONDS):
            try:
                self.stats.write()
            except OSError:
                log.exception("could not write %s", self.paths.runner_stats)

    # ----------------------------------------------------------- shutdown

    def stop(self, timeout_seconds: float = 10.0) -> None:
        """Stop polling (an in-flight batch is not committed: it is re-delivered next start)."""
        self.stop_event.set()
        for poller in list(self.pollers.values()):
            poller.wake()  # out of its pause between reads
        for invoker in self.invokers.values():
            invoker.shutdown()  # ends a running invocation now, as a killed runner would
        for thread in [*self.pollers.values(), *self._background]:
            thread.join(timeout_seconds)
        for invoker in self.invokers.values():
            invoker.shutdown()
        with contextlib.suppress(OSError):
            self.stats.write()
