from __future__ import annotations

import pytest

from ranking.query_features import detect_temporal_intent
from shared.errors import InvalidArgument

NOW_YEAR = 2025

POSITIVES = [
    ("latest release notes for numpy", "latest"),
    ("what are the most recent results on CRISPR", "most recent"),
    ("recent advances in battery chemistry", "recent"),
    ("what changed recently in the tax code", "recently"),
    ("newest GPU benchmarks", "newest"),
    ("current version of Python", "current version"),
    ("is this guidance still current", "still current"),
    ("what is the current status of the merger", "current status"),
    ("who is currently the CEO of Acme", "currently"),
    ("interest rates today", "today"),
    ("today's top stories", "today's"),
    ("revenue this quarter", "this quarter"),
    ("what did we ship last week", "last week"),
    ("outages in the past 3 months", "past 3 months"),
    ("incidents over the last few days", "last few days"),
    ("is the onboarding doc up to date", "up to date"),
    ("up-to-date dependency list", "up-to-date"),
    ("what's new in Django 5", "what's new"),
    ("new in Python 3.12", "new in"),
    ("updated guidelines for hypertension", "updated guidelines"),
    ("recently updated policies", "recently updated"),
    ("GDP growth in 2024", "2024"),
    ("election results 1992", "1992"),
    ("2024-Q3 earnings", "2024-q3"),
    ("Q3 2024 revenue", "q3 2024"),
    ("Q4 earnings call", "q4 earnings"),
    ("plans for next Q2", "next q2"),
    ("FY2025 budget", "fy2025"),
    ("H1 2025 hiring plan", "h1 2025"),
    ("first quarter of 2023 sales", "first quarter of 2023"),
    ("newly released embedding models", "newly released"),
    ("pricing nowadays", "nowadays"),
    ("what is the state of the project right now", "right now"),
    ("roadmap for next year", "next year"),
    ("Q3'24 numbers", "q3'24"),
]

NEGATIVES = [
    "current density in a copper wire",
    "electric current through a resistor",
    "currents in the ocean",
    "ocean currents and climate",
    "alternating current versus direct current",
    "the current state of the system evolves by the transition matrix",
    "how are the weights updated during backpropagation",
    "parameters are updated by gradient descent",
    "a cohort of 2000 patients",
    "an additional annual toll of 2000 deaths",
    "1/2000 in UK have abnormal PrP positivity",
    "antibody diluted 1:2000 in PBS",
    "sample size n = 2019",
    "a 2000 W heater",
    "3.2000 mm tolerance",
    "the last month of gestation",
    "sea level rise over the past 50 years",
    "interquartile range from Q1 to Q3",
    "a new in vitro assay for toxicity",
    "Maxwell's equations in differential form",
    "photosynthesis in C4 plants",
    "Newton published the Principia in 1687",
    "ISO 9001 certification requirements",
    "cost below $2000",
    "population projections for 2090",
    "a new insight into protein folding",
    "version v2024 of the parser",
    "",
]


@pytest.mark.parametrize("query, cue", POSITIVES)
def test_temporal_intent_fires_on_a_time_sensitive_query(query: str, cue: str) -> None:
    intent = detect_temporal_intent(query, now_year=NOW_YEAR)
    assert intent.has_intent
    assert cue in intent.cues


@pytest.mark.parametrize("query", NEGATIVES)
def test_temporal_intent_stays_off_on_timeless_or_scientific_text(query: str) -> None:
    intent = detect_temporal_intent(query, now_year=NOW_YEAR)
    assert not intent.has_intent, intent.cues
    assert intent.cues == ()


def test_years_count_from_1990_to_next_year() -> None:
    def fires(q: str) -> bool:
        return detect_temporal_intent(q, now_year=NOW_YEAR).has_intent

    assert fires("report 1990") and not fires("report 1989")
    assert fires("outlook 2026") and not fires("outlook 2027")


def test_cues_are_reported_in_order_lower_cased_once() -> None:
    intent = detect_temporal_intent("LATEST news, latest   Q3 2024 figures, Latest",
                                    now_year=NOW_YEAR)
    assert intent.cues == ("latest", "q3 2024", "2024")


def test_years_count_up_to_the_year_after_the_callers_now() -> None:
    assert detect_temporal_intent("budget 2031", now_year=2030).has_intent
    assert not detect_temporal_intent("budget 2032", now_year=2030).has_intent
    assert not detect_temporal_intent("budget 2031", now_year=2029).has_intent


def test_a_query_that_is_not_a_string_is_rejected() -> None:
    with pytest.raises(InvalidArgument) as err:
        detect_temporal_intent(None, now_year=NOW_YEAR)  # type: ignore[arg-type]
    assert err.value.field == "query"
