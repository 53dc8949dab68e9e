"""Which changes of a deployed stack's settings the state it already holds survives.

Some settings shape what is stored: the value domain bounds every stored total, the number
of node groups and the idempotency mode name and write the reduce markers, the marker TTL
decides how long a replay is recognised, the hierarchy levels place every trade. A deploy
that changes one of them over existing state must either be safe by construction or be
refused, with one line naming the setting and what to do, before any function runs with it.
`change_refusal` is that decision, a pure function of the settings deployed and the settings
to deploy (`StateSettings`, carried as the properties of the stack's settings guard, a custom
resource, in the string form CloudFormation gives them), so every deployer applies the same
rule: CloudFormation through the guard's handler (`settings_guard_function`), and the local
deployer, which runs that handler itself.

- `hierarchyLevels`: always safe. Every StateTable item stores its node path and the map
  function counts a trade at its stored path (`aggregation.deltas.image_node_path`), so a
  trade moves to its new nodes at its next version and leaves its old ones exactly.
- `markerTtlDays`: safe while at least `MIN_MARKER_TTL_DAYS` (synthesis refuses less). A
  marker's expiry is fixed when it is written (its delta item's `CreatedAt` plus the TTL
  then), so every existing marker still outlives the 24-hour stream retention, and so does
  every marker written under the new TTL.
- the value domain (`valueIntegerDigits`, `valueFractionDigits`): safe exactly when neither
  bound shrinks. Proof. Invariant: every Value ever admitted lies in the domain D(i, f)
  deployed now (|v| < 10^i, v x 10^f an integer). It holds on a fresh stack. A change to
  D(i', f') with i' >= i and f' >= f keeps it, because D(i, f) is contained in D(i', f') and
  the state function admits only D(i', f'). Under the invariant every node total and every
  `ADD` operand is a sum of values of D(i', f'), which needs at most i' + f' + ceil(log10 n)
  digits for n terms, and synthesis keeps i' + f' <= 38 - `MIN_SUM_HEADROOM_DIGITS`
  (`aggregation.value_domain`): sums of up to 10^9 values fit DynamoDB's 38 digits. A
  shrinking bound breaks the invariant: stored values outside the new domain stay in the
  totals, and since only the deployed and the new settings are compared (nothing remembers
  the wider domain), a later widening of the other bound would be accepted and would mix
  their digits with new ones beyond 38: 18+10 -> 28+1 makes a stored 1E-10 plus two
  28-digit values a 39-digit total that DynamoDB refuses on every retry, stalling reduce.
  So a narrower domain needs a fresh stack.
- `reduceIdempotency` (`crt+marker` <-> `crt`): refused. A retry that spans the switch is
  no longer the identical request (markers are added or dropped from the transaction under
  the same ClientRequestToken): DynamoDB answers `IdempotentParameterMismatchException`; in
  mode `crt` that fails the invocation, and crt+marker finds no marker of a transaction
  committed under `crt`, so either way the batch retries until the token expires after
  10 minutes and is then applied a second time. Whether a retry is pending cannot be seen
  from the settings, so the switch needs a fresh stack (or a drained DeltaTable stream, which
  no deploy can check).
- `NODE_GROUPS` (a code constant, carried so a release that changes it is caught): refused
  for the same reason. It is part of every marker id, so a replay of a delta applied under
  the old grouping finds none of its markers and is applied again.
- `aggregateSlices`: safe in mode `crt+marker`, refused in mode `crt` (the two modes are equal
  here: a change of mode is refused above). What the count changes is only *where* a unit
  adds: the slice its transaction's token names among S
  (`aggregation.transactions.transaction_slice`, mode `crt+marker`) or `slice_of(StreamShard,
  S)` (`aggregation.aggregate_items`, mode `crt`) picks another slice item of the same node.
  It changes neither a unit's marker id (batch hash, node group and part:
  `aggregation.transactions.split_into_units`) nor what a unit adds; in `crt` nor its token (a
  function of the marker ids alone), while in `crt+marker` over more than one slice the token
  names the count too (`aggregation.transactions.client_request_token`). Proof for
  `crt+marker`. Every reader sums all the slices of a node (and of `#stats`) it finds,
  whatever the count deployed, so a node's total is the sum of the units applied to any of its
  slices, and exactness needs only that each unit is applied once. A unit is applied only in a
  transaction that also puts its marker with `attribute_not_exists`, all or nothing. Take a
  unit delivered again after the change (a retry straddling the deploy, or a replay). (a) Its
  first application committed: its marker exists. If its new transaction bears the same token
  within 10 minutes, its parameters differ (other slice keys), so DynamoDB answers
  IdempotentParameterMismatchException and the strongly consistent read of the markers finds
  it applied: dropped. Otherwise the new transaction's marker Put fails its condition, the
  transaction is cancelled whole, and the cancellation names the unit as applied: dropped.
  Either way it adds nothing, to any slice. (b) It never committed: no marker exists, and it
  is applied once, to its new slice, by the same rule as any unit. The same holds for the
  applied-message count, which rides in the unit's transaction to its slice of `#stats`. Fewer
  slices leave the higher slices' items in place, still summed. Proof of the refusal for `crt`
  (no markers): take a transaction that committed under S slices whose invocation then failed
  (a later transaction, a timeout), and its retry under S' slices. The retry sends the same
  token with other keys: IdempotentParameterMismatchException, which without markers fails the
  invocation; Lambda retries it until the token expires after 10 minutes, and then the
  transaction is applied again: counted twice. Under an unchanged count that retry is the
  identical request, which the token makes a no-op (within the 10 minutes that are all `crt`
  promises), so it is the change that counts it twice. A stack deployed by a release before
  this setting (its guard carries no `AggregateSlices`) wrote slice 0 only, which is one
  slice: it is read as 1. The same proof covers the code change of issue 37, so the guard
  carries nothing for it: in `crt+marker` a release before it added a unit to the slice of its
  delta item and planned each slice apart, this one plans an invocation's units together and
  writes the slice each transaction's token names. Marker ids and what a unit adds are
  unchanged; where a unit adds, which units share a transaction and (over more than one slice,
  where the token names the slice count) the token differ, and the proof above never assumed
  any of them: a new token only skips case (a)'s mismatch for the markers' own refusal. At one
  slice nothing differs at all. Mode `crt` keeps the rule by item slice, so a `crt` retry
  straddling the upgrade is the identical transaction.
- what forms a reduce transaction (`reduceBatchSize`, `reduceParallelizationFactor`, and the code
  constants `MAX_NODES_PER_UNIT` and `MAX_TRANSACTION_ACTIONS`): refused in mode `crt`, like
  the slices and for the same reason. A reduce invocation's delta items are the records one lane
  of the DeltaTable mapping delivers: at most `BatchSize`, of the lane their key hashes to among
  `ParallelizationFactor` (Lambda Developer Guide, "Concurrent batches per shard"). Its units
  come from each item, its node groups (`NODE_GROUPS`) and `MAX_NODES_PER_UNIT`; its
  transactions pack them per slice into `MAX_TRANSACTION_ACTIONS`; each token names the units of
  one transaction (`aggregation.transactions`). A change of any of them makes a retry of a batch
  that committed and then failed other transactions under other tokens, which in `crt` apply it
  again at once (issue 32: 10,000 -> 20,000 msg/s made `auto` pick 3 lanes instead of 1, and a
  root came out 42 / 12 trades instead of 21 / 6). So in `crt` `auto` fixes them
  (`stacks.settings`) and the guard carries them: nothing else shapes a transaction (the
  mapping has no batching window, bisection or partial acknowledgement: `stacks.stages`; a
  delta item is written once, so the map settings change only items not yet written).
  `MAX_NODES_PER_UNIT` is refused in `crt+marker` too: it numbers a unit's part in its marker
  id, so a replay of an item applied under another value meets markers naming other nodes. A
  guard deployed by a release before these properties (it carries no `ReduceBatchSize` or
  `ReduceParallelizationFactor`) says nothing of the batches in flight: in `crt` it is refused
  unless the deploy declares the pipeline drained (`upgradeDrained`, below); the constants,
  never changed before they were carried, are read as their values.

A stack deployed by a release without the guard (every release up to stop 17, b5dc996) has
no deployed settings to compare with: the guard's first request there is a Create, which
CloudFormation also sends a new stack. Those releases keyed each node by its bare path and
`#stats` as one item, so whatever the new settings, the new code writes other keys than the
old wrote: `unguarded_upgrade_refusal`. In mode `crt+marker` that upgrade is exact in place
(a retry the old code committed meets its token with other keys, and then its markers:
`python -m local upgrade --from stop-17`). In mode `crt` it is not (the same retry has no
marker to find: refused until the token expires, then applied twice), unless no reduce batch
is in flight: the upgrade of a drained pipeline (README, "Upgrading in place").

**Rollback.** When the guard refuses an Update, CloudFormation rolls the stack back and sends
the guard the reverse Update: the properties it refused as `OldResourceProperties`, the ones in
force as `ResourceProperties`, and the physical id the guard holds (the CDK provider framework
keeps it when its handler fails: aws-cdk issue 17040). Every symmetric rule above would refuse
that too and leave the stack in UPDATE_ROLLBACK_FAILED. The guard's physical id is a name of
the settings in force (`settings_id`: a replaced guard gets a new one, a rollback keeps the old
one), so an Update whose new properties bear the physical id it is sent with returns the guard
to the settings it holds: accepted, whatever the old properties say (`update_refusal`). That
changes nothing in force, so no other request can use it to pass a change: the id is a SHA-256
of the properties, and another set of settings would need a collision of its first 64 bits.

So on a Create the guard tells a new stack from one of those releases by the state itself
(`first_guard_refusal`): every transaction those releases committed also updated the one
`#stats` item (`STATS_KEY`), so that item exists exactly when some reduce transaction committed,
and without one no committed batch can be retried. A new stack's AggregateTable is created
before the guard, empty. The guard reads that one item (a strongly consistent `GetItem`) and
refuses a Create in mode `crt` over a table that holds it unless the deploy declares the
pipeline drained (`upgradeDrained`, `UPGRADE_DRAINED`: the operator's word, which no deploy can
check, as the local `up --drained` is).
"""

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from aggregation.hierarchy import LEVEL_LIST_SEPARATOR
from aggregation.names import TOKEN_ONLY
from aggregation.transactions import MAX_NODES_PER_UNIT, MAX_TRANSACTION_ACTIONS, MIN_MARKER_TTL_DAYS, NODE_GROUPS
from aggregation.value_domain import ValueDomain

HIERARCHY_LEVELS: Final = "HierarchyLevels"
VALUE_INTEGER_DIGITS: Final = "ValueIntegerDigits"
VALUE_FRACTION_DIGITS: Final = "ValueFractionDigits"
NODE_GROUPS_PROPERTY: Final = "NodeGroups"
MARKER_TTL_DAYS: Final = "MarkerTtlDays"
REDUCE_IDEMPOTENCY: Final = "ReduceIdempotency"
AGGREGATE_SLICES: Final = "AggregateSlices"
REDUCE_BATCH_SIZE: Final = "ReduceBatchSize"
REDUCE_PARALLELIZATION_FACTOR: Final = "ReduceParallelizationFactor"
NODES_PER_UNIT: Final = "NodesPerUnit"
TRANSACTION_ACTIONS: Final = "TransactionActions"
AGGREGATE_TABLE_PROPERTY: Final = "AggregateTable"
"""Not a setting: the table whose `#stats` item tells the guard's Create that the stack holds state."""
UPGRADE_DRAINED: Final = "UpgradeDrained"
"""Not a setting: present ("true") when the deploy declares no reduce batch in flight (`upgradeDrained`)."""
SLICES_BEFORE_THE_SETTING: Final = 1
"""`AggregateSlices` of a guard a release before the setting deployed: it wrote slice 0 only."""
SETTING_PROPERTIES: Final = (
    HIERARCHY_LEVELS,
    VALUE_INTEGER_DIGITS,
    VALUE_FRACTION_DIGITS,
    NODE_GROUPS_PROPERTY,
    MARKER_TTL_DAYS,
    REDUCE_IDEMPOTENCY,
    AGGREGATE_SLICES,
    REDUCE_BATCH_SIZE,
    REDUCE_PARALLELIZATION_FACTOR,
    NODES_PER_UNIT,
    TRANSACTION_ACTIONS,
)
"""The properties that are settings: what the guard's physical id names (`settings_id`)."""
SETTINGS_ID_PREFIX: Final = "state-settings-"


class UnreadableStateSettings(ValueError):
    """The properties are not the string form `StateSettings.properties` writes."""


@dataclass(frozen=True)
class StateSettings:
    """The settings the stored state depends on."""

    hierarchy_levels: tuple[str, ...]
    value_domain: ValueDomain
    marker_ttl_days: int
    reduce_idempotency: str
    aggregate_slices: int = SLICES_BEFORE_THE_SETTING
    node_groups: int = NODE_GROUPS
    reduce_batch_size: int | None = None
    """The reduce mapping's `BatchSize`; None when the deployed guard predates carrying it."""
    reduce_parallelization_factor: int | None = None
    """The reduce mapping's `ParallelizationFactor` (its lanes); None as above."""
    nodes_per_unit: int = MAX_NODES_PER_UNIT
    transaction_actions: int = MAX_TRANSACTION_ACTIONS

    def properties(self) -> dict[str, str]:
        """As strings: CloudFormation hands every property of a resource over as a string. A
        setting not known (None) is left out, as the release that deployed the guard left it."""
        optional = {
            REDUCE_BATCH_SIZE: self.reduce_batch_size,
            REDUCE_PARALLELIZATION_FACTOR: self.reduce_parallelization_factor,
        }
        return {
            HIERARCHY_LEVELS: LEVEL_LIST_SEPARATOR.join(self.hierarchy_levels),
            VALUE_INTEGER_DIGITS: str(self.value_domain.integer_digits),
            VALUE_FRACTION_DIGITS: str(self.value_domain.fraction_digits),
            NODE_GROUPS_PROPERTY: str(self.node_groups),
            MARKER_TTL_DAYS: str(self.marker_ttl_days),
            REDUCE_IDEMPOTENCY: self.reduce_idempotency,
            AGGREGATE_SLICES: str(self.aggregate_slices),
            **{name: str(value) for name, value in optional.items() if value is not None},
            NODES_PER_UNIT: str(self.nodes_per_unit),
            TRANSACTION_ACTIONS: str(self.transaction_actions),
        }

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> "StateSettings":
        try:
            return cls(
                hierarchy_levels=tuple(str(properties[HIERARCHY_LEVELS]).split(LEVEL_LIST_SEPARATOR)),
                value_domain=ValueDomain(int(properties[VALUE_INTEGER_DIGITS]), int(properties[VALUE_FRACTION_DIGITS])),
                marker_ttl_days=int(properties[MARKER_TTL_DAYS]),
                reduce_idempotency=str(properties[REDUCE_IDEMPOTENCY]),
                aggregate_slices=int(properties.get(AGGREGATE_SLICES, SLICES_BEFORE_THE_SETTING)),
                node_groups=int(properties[NODE_GROUPS_PROPERTY]),
                reduce_batch_size=_optional_int(properties, REDUCE_BATCH_SIZE),
                reduce_parallelization_factor=_optional_int(properties, REDUCE_PARALLELIZATION_FACTOR),
                nodes_per_unit=int(properties.get(NODES_PER_UNIT, MAX_NODES_PER_UNIT)),
                transaction_actions=int(properties.get(TRANSACTION_ACTIONS, MAX_TRANSACTION_ACTIONS)),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise UnreadableStateSettings(f"not state settings: {dict(properties)!r} ({error})") from None


def _optional_int(properties: Mapping[str, Any], name: str) -> int | None:
    return int(properties[name]) if name in properties else None


def settings_id(properties: Mapping[str, Any]) -> str:
    """The guard's physical id: a name of exactly the setting properties given, as given.

    Only the settings count (not the service token, the table's name or `UpgradeDrained`), so
    equal settings keep the guard and changed ones replace it. The properties are taken as sent,
    and only those present, so a guard a release before a property deployed keeps the id that
    release gave it (which hashed the same strings): its rollback is recognised too."""
    named = {name: str(properties[name]) for name in SETTING_PROPERTIES if name in properties}
    canonical = json.dumps(named, sort_keys=True)
    return SETTINGS_ID_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def update_refusal(held_id: str, old_properties: Mapping[str, Any], new_properties: Mapping[str, Any]) -> str | None:
    """The guard's Update, sent with the physical id it holds (`held_id`): None when it is safe.

    New properties that `held_id` names return the guard to the settings in force: a rollback
    (module docstring), accepted whatever the old properties say. Any other Update is a change
    from the old properties to the new, which `change_refusal` judges."""
    if settings_id(new_properties) == held_id:
        return None
    return change_refusal(
        StateSettings.from_properties(old_properties),
        StateSettings.from_properties(new_properties),
        drained=new_properties.get(UPGRADE_DRAINED) == "true",
    )


def change_refusal(deployed: StateSettings, new: StateSettings, *, drained: bool = False) -> str | None:
    """One line naming the setting and what to do when `new` is unsafe over state kept under
    `deployed`; None when every stored total, marker and trade stays exact (module docstring).
    `drained`: the deploy declares no reduce batch in flight, which only matters when the
    deployed guard does not say how the batches in flight were formed."""
    old_domain, new_domain = deployed.value_domain, new.value_domain
    for name, before, after in (
        ("valueIntegerDigits", old_domain.integer_digits, new_domain.integer_digits),
        ("valueFractionDigits", old_domain.fraction_digits, new_domain.fraction_digits),
    ):
        if after < before:
            return (
                f"{name} {before} -> {after} narrows the value domain of a stack that holds totals summed in the "
                "wider one, which later sums could push past 38 digits: keep it at least "
                f"{before} (a domain may only widen), or deploy the narrower domain as a new stack"
            )
    for name, before, after in (
        ("NODE_GROUPS", deployed.node_groups, new.node_groups),
        ("MAX_NODES_PER_UNIT", deployed.nodes_per_unit, new.nodes_per_unit),
    ):
        if after != before:
            return (
                f"{name} {before} -> {after} renames every reduce marker, so a replayed "
                "delta would be applied twice: deploy this release as a new stack"
            )
    if new.reduce_idempotency != deployed.reduce_idempotency:
        return (
            f"reduceIdempotency {deployed.reduce_idempotency} -> {new.reduce_idempotency} changes the transactions "
            "a pending retry sends under the same token, which then applies it twice: keep "
            f"{deployed.reduce_idempotency}, or deploy the new mode as a new stack"
        )
    if new.reduce_idempotency == TOKEN_ONLY:
        refusal = _reformed_transaction_refusal(deployed, new, drained=drained)
        if refusal is not None:
            return refusal
    if new.marker_ttl_days < MIN_MARKER_TTL_DAYS:
        return (
            f"markerTtlDays {new.marker_ttl_days} would let markers expire before the 24 h a stream replays: "
            f"keep it at least {MIN_MARKER_TTL_DAYS}"
        )
    return None


def _reformed_transaction_refusal(deployed: StateSettings, new: StateSettings, *, drained: bool) -> str | None:
    """In mode `crt`: one line when `new` forms other reduce transactions from the same delta
    items than `deployed` (module docstring), or when the deployed guard does not say."""
    unknown = [
        name
        for name, before in (
            ("reduceBatchSize", deployed.reduce_batch_size),
            ("reduceParallelizationFactor", deployed.reduce_parallelization_factor),
        )
        if before is None
    ]
    if unknown and not drained:
        return (
            f"the deployed settings guard does not carry {' or '.join(unknown)} (a release before this one): in "
            f"reduceIdempotency {TOKEN_ONLY} a reduce batch in flight that the new settings form otherwise "
            "would be applied twice: stop the producers, let the pipeline drain, then deploy declaring it "
            "drained (`-c upgradeDrained=true`, locally `up --drained`; README, Upgrading in place)"
        )
    for name, before, after in (
        ("aggregateSlices", deployed.aggregate_slices, new.aggregate_slices),
        ("reduceBatchSize", deployed.reduce_batch_size, new.reduce_batch_size),
        ("reduceParallelizationFactor", deployed.reduce_parallelization_factor, new.reduce_parallelization_factor),
        ("MAX_TRANSACTION_ACTIONS", deployed.transaction_actions, new.transaction_actions),
    ):
        if before is not None and after != before:
            return (
                f"{name} {before} -> {after} in reduceIdempotency {TOKEN_ONLY} makes a pending retry send "
                "other transactions than the ones that committed, which then applies it twice: keep "
                f"{before}, or deploy the new value as a new stack"
            )
    return None


def unguarded_upgrade_refusal(new: StateSettings) -> str | None:
    """One line when `new` is unsafe over a stack deployed without the settings guard (module
    docstring); None when such an upgrade stays exact with batches in flight."""
    if new.reduce_idempotency != TOKEN_ONLY:
        return None
    return (
        f"the deployed stack has no settings guard (a release before slices): in reduceIdempotency {TOKEN_ONLY} a "
        "reduce batch its code committed and the new code retries sends other keys under the same token, which "
        "then applies it twice once the token expires: stop the producers, let the pipeline drain, then deploy "
        "declaring it drained (`-c upgradeDrained=true`, locally `up --drained`; README, Upgrading in place)"
    )


def first_guard_refusal(new: StateSettings, *, holds_state: bool, drained: bool) -> str | None:
    """The guard's Create: one line when `new` is unsafe, None when it is exact (module docstring).

    `holds_state`: the AggregateTable holds the `#stats` item, which only a committed reduce
    transaction writes, so the stack is one a release without the guard deployed and used (a new
    stack's table is empty); `drained`: the deploy declares no reduce batch in flight."""
    if not holds_state or drained:
        return None
    return unguarded_upgrade_refusal(new)
