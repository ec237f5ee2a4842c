"""10,000 generated malformed model outputs through every structured-output parser: nothing escapes, every one
lands on its documented fallback and is counted."""

from mmaudit.rag.evaluate.fuzz import fuzz, malformed


def test_malformed_outputs_cover_the_hostile_kinds():
    outs = malformed(1000, seed=3)
    assert any(o == "" for o in outs) and any(not isinstance(o, str) for o in outs)
    assert any(isinstance(o, str) and len(o) > 50_000 for o in outs)
    assert any(isinstance(o, str) and o.startswith("[" * 1000) for o in outs)
    assert any(isinstance(o, str) and "```json" in o for o in outs)


def test_ten_thousand_malformed_outputs_through_every_parser(capsys):
    report = fuzz(10_000, seed=0)
    assert set(report) == {"self_check", "triage", "text_trust", "resolver_select", "resolver_compose", "judge",
                           "polluter", "atomic_claims"}
    for name, r in report.items():
        assert r["exceptions"] == 0, (name, r["examples"])
        assert sum(r["outcomes"].values()) == 10_000
    # the documented fallbacks, and only those
    assert set(report["self_check"]["outcomes"]) <= {"parsed", "unparsed -> TRUST", "unparsed -> FALLBACK"}
    assert set(report["triage"]["outcomes"]) <= {"parsed", "unparsed -> FALLBACK"}
    assert set(report["resolver_select"]["outcomes"]) <= {"parsed", "unparsed -> FALLBACK", "unparsed -> FULL_MM",
                                                          "unparsed -> TEXT_ONLY"}
    assert set(report["judge"]["outcomes"]) <= {"parsed", "unparsed -> uncertain (0.25)"}
    assert report["judge"]["outcomes"]["unparsed -> uncertain (0.25)"] > 5000
    with capsys.disabled():
        for name, r in report.items():
            print(f"\n{name}: {r['outcomes']}, exceptions {r['exceptions']}", end="")
