"""The releases a deployed stack may be upgraded from, each with why it matters.

A release is the commit that landed at a stop of the project's history. `python -m local
upgrade --from <name or commit>` deploys one of them and upgrades it to this checkout while
messages flow (`local.upgrade.scenario`); `make upgrade` does so from every release listed
here. Add the commit of each new release, with what its stack leaves behind that the next
code must still read.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Release:
    name: str
    commit: str
    why: str
    guard_carries_reduce_batches: bool = False
    """Whether its settings guard (`Custom::StateSettingsGuard`) carries `ReduceBatchSize` and
    `ReduceParallelizationFactor`. Over a release whose guard does not (none of those listed: the
    guard came after stop 17 and carried them only after stop 29), nothing says how the reduce
    batches in flight were formed, so an upgrade in mode `crt` is refused unless declared drained
    (`aggregation.setting_changes`: `first_guard_refusal` without a guard, the deployed guard's
    missing properties with one)."""


RELEASES: tuple[Release, ...] = (
    Release(
        name="stop-17",
        commit="b5dc996",
        why="the last release before reduce scaled out: one reducer (reserved concurrency 1), node totals in "
        "one item keyed by the bare path key, one `#stats` item, no settings guard, no quarantine TTL nor "
        "deletion protection on the tables: the new code must add to the same nodes through slices, read "
        "the unsliced items as one more slice, and recognise the markers and tokens the old reducer wrote",
    ),
    Release(
        name="stop-27",
        commit="a056586",
        why="the first release with sliced totals (`node#<slice>#<path key>`, `#stats#<slice>`) and many "
        "reducers: every later layout must read what it wrote",
    ),
    Release(
        name="stop-28",
        commit="cb98d6f",
        why="the release before the registry shards and `auto` sizing: an archive of one object per delta item "
        "and a registry in one object (`metastore/registry.json`), which `audit` must read beside the batch "
        "objects the new archive writes, each item counted once",
    ),
    Release(
        name="stop-29",
        commit="0d0e386",
        why="the latest release, and the last whose state function wrote with conditional `UpdateItem`s: state "
        "batches it committed are retried by the PartiQL writer, whose INSERT meets the old item and whose "
        "UPDATE must recognise the old write by its `WrittenByEventId`; its archive wrote one object per delta "
        "item and counted them in registry shards (`metastore/registry/<k>.json`), read by `audit` after the "
        "upgrade, the items the new archive writes again counted once",
    ),
)


class UnknownRelease(ValueError):
    """Not a release name of `RELEASES` nor a commit of one."""


def find_release(name_or_commit: str) -> Release:
    """The release named, or whose commit starts with (or is a prefix of) `name_or_commit`."""
    wanted = name_or_commit.strip().lower()
    for release in RELEASES:
        if wanted == release.name or (
            len(wanted) >= 7 and (release.commit.startswith(wanted) or wanted.startswith(release.commit))
        ):
            return release
    known = ", ".join(f"{release.name} ({release.commit})" for release in RELEASES)
    raise UnknownRelease(f"not a release: {name_or_commit!r} (releases: {known})")
