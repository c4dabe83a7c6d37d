"""tools.bench.slowdown_table: bad groups are refused naming them (exit status 2, nothing run), and one short run
of a pair prints a row per job with the contention model's prediction beside the measurement."""
import pytest

from tools.bench import slowdown_table as st


def test_a_bad_group_is_named_and_nothing_runs(capsys):
    assert st.main(["--group", "digits-cnn"]) == 2
    assert ("--group 'digits-cnn': expected A+B[+C...] of digits-cnn, tiny-lm, resnet18, mlp-script, lstm-script"
            in capsys.readouterr().err)
    assert st.main(["--group", "digits-cnn+nope"]) == 2
    assert st.main(["--runs", "0"]) == 2
    assert st.parse_groups(["digits-cnn+tiny-lm+resnet18"]) == [["digits-cnn", "tiny-lm", "resnet18"]]


@pytest.mark.slow
def test_a_pair_of_a_plain_script_and_a_catalog_job_is_measured_against_the_contention_model(capsys):
    # the script runs as a job with code does (tools.jobpath.run_script): sandboxed, its iterations seen by the agent
    assert st.main(["--group", "lstm-script+tiny-lm", "--runs", "1", "--iterations", "8"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [line.split(" | ") for line in out if line.startswith("| lstm-script+tiny-lm | 1 |")]
    assert len(rows) == 2 and all(row[5] != "n/a" for row in rows), out
    shares = [float(row[3]) for row in rows]
    assert all(0 < s <= 1 for s in shares), rows
    for row in rows:  # the group's one prediction: max(1, sum of the shares measured alone)
        assert float(row[4]) == pytest.approx(max(1.0, sum(shares)), abs=0.02), rows
