"""In-place upgrades from earlier releases, run for real on the local stack (`python -m local upgrade`).

`releases` names the releases worth upgrading from and why; `release_tree` synthesizes a
release's own tree (from this clone's git history) into a cloud assembly; `scenario` deploys
one, sends, upgrades to this checkout mid-stream and verifies the totals exactly.
"""
