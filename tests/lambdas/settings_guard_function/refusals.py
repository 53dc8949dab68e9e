"""Every rule by which the settings guard refuses an Update, for the handler's and the deployer's tests."""

from dataclasses import replace

from aggregation.names import TOKEN_AND_MARKERS, TOKEN_ONLY
from aggregation.setting_changes import StateSettings
from aggregation.value_domain import DEFAULT_VALUE_DOMAIN, ValueDomain

DEPLOYED = StateSettings(
    hierarchy_levels=("RiskType", "TradeDesk", "Region"),
    value_domain=DEFAULT_VALUE_DOMAIN,
    marker_ttl_days=7,
    reduce_idempotency=TOKEN_AND_MARKERS,
    reduce_batch_size=10,
    reduce_parallelization_factor=1,
)
CRT = replace(DEPLOYED, reduce_idempotency=TOKEN_ONLY)
EARLIER_CRT = replace(CRT, reduce_batch_size=None, reduce_parallelization_factor=None)
"""A `crt` guard an earlier release deployed: it carried neither the batch size nor the lanes."""

REFUSAL_RULES = [
    (DEPLOYED, replace(DEPLOYED, value_domain=ValueDomain(28, 1)), "valueFractionDigits 10 -> 1 narrows the value"),
    (replace(DEPLOYED, marker_ttl_days=7), replace(DEPLOYED, marker_ttl_days=1), "markerTtlDays 1 would let markers"),
    (DEPLOYED, replace(DEPLOYED, reduce_idempotency=TOKEN_ONLY), "reduceIdempotency crt+marker -> crt changes"),
    (CRT, replace(CRT, reduce_idempotency=TOKEN_AND_MARKERS), "reduceIdempotency crt -> crt+marker changes"),
    (DEPLOYED, replace(DEPLOYED, node_groups=3), "NODE_GROUPS 2 -> 3 renames every reduce marker"),
    (DEPLOYED, replace(DEPLOYED, nodes_per_unit=50), "MAX_NODES_PER_UNIT 98 -> 50 renames every reduce marker"),
    (CRT, replace(CRT, aggregate_slices=16), "aggregateSlices 1 -> 16 in reduceIdempotency crt"),
    (CRT, replace(CRT, reduce_batch_size=100), "reduceBatchSize 10 -> 100 in reduceIdempotency crt"),
    (CRT, replace(CRT, reduce_parallelization_factor=3), "reduceParallelizationFactor 1 -> 3 in reduceIdempotency crt"),
    (CRT, replace(CRT, transaction_actions=25), "MAX_TRANSACTION_ACTIONS 100 -> 25 in reduceIdempotency crt"),
    (EARLIER_CRT, CRT, "the deployed settings guard does not carry reduceBatchSize or reduceParallelizationFactor"),
]
"""Every rule that refuses an Update: the settings deployed, the change, the start of the reason."""
