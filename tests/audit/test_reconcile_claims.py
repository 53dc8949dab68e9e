"""`reconcile`'s view of open registry claims: leftovers of dead deliveries pass, missing objects fail."""

from __future__ import annotations

from aggregation.archive import ClaimRef, ObservedObject, Registry, claim_objects, registry_totals, settle_objects
from audit.archive_reader import ArchiveContents
from audit.reconcile import open_claims_check
from tests.lambdas.aggregation.test_archive import delta

NOW = "2026-11-23T12:00:00.000Z"


def counted(*seeds: str) -> tuple[Registry, ArchiveContents]:
    """A registry that claimed, wrote and counted one object per seed, and the bucket holding them."""
    deltas = [delta(seed) for seed in seeds]
    registry = claim_objects(Registry(), [d.batch_hash for d in deltas], NOW)
    assert registry is not None
    observed = [ObservedObject(d, ClaimRef(0, registry.claims[d.batch_hash])) for d in deltas]
    settled = settle_objects(registry, 0, observed, NOW)
    assert settled is not None and not settled.claims
    return settled, ArchiveContents(deltas=deltas, registry=registry_totals([settled]))


def test_no_open_claims_pass() -> None:
    registry, archive = counted("a", "b")
    check = open_claims_check(registry_totals([registry]), archive)
    assert check.ok and check.detail == "no open claims"


def test_a_claim_reopened_by_a_delivery_that_died_is_a_harmless_leftover() -> None:
    registry, archive = counted("a", "b")
    reopened = claim_objects(registry, [delta("a").batch_hash], NOW)  # a re-delivery of "a", then it died
    assert reopened is not None
    check = open_claims_check(registry_totals([reopened]), archive)
    assert check.ok and "1 leftovers" in check.detail


def test_a_claim_whose_object_never_appeared_fails() -> None:
    registry, archive = counted("a")
    waiting = claim_objects(registry, [delta("lost").batch_hash], NOW)
    assert waiting is not None
    check = open_claims_check(registry_totals([waiting]), archive)
    assert not check.ok and "1 without an object" in check.detail
