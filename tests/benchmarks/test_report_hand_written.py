"""`make bench` regenerates docs/benchmarks.md but keeps the sections measured by hand."""

from benchmarks.report import hand_written_sections

PAGE = """# Benchmarks

## 1. Generated

figures

## Note, measured by hand: something

kept 1

## Reproduce

generated again

## Profiles, recorded by hand

kept 2
"""


def test_only_the_sections_headed_by_hand_are_kept_in_their_order() -> None:
    assert hand_written_sections(PAGE) == (
        "## Note, measured by hand: something\n\nkept 1\n\n## Profiles, recorded by hand\n\nkept 2\n"
    )


def test_a_page_without_them_keeps_nothing() -> None:
    assert hand_written_sections("# Benchmarks\n\n## 1. Generated\n") == ""
