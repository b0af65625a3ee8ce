"""The GPU timer's run budget (CPU only: the arithmetic that decides how many runs a timing takes)."""

from instance_factory.harness.timing import MIN_RUNS_PER_ROUND, ROUNDS, runs_per_round


def test_runs_per_round_fill_the_budget():
    assert runs_per_round(60.0, 0.1) == 600 // ROUNDS  # 60 ms of 0.1 ms runs over the rounds
    assert runs_per_round(8.0, 0.05) == 160 // ROUNDS


def test_a_host_stall_never_leaves_one_sample_per_round():
    # the first five runs took 3 ms each on the host (compile pool on the CPU): the 8 ms quick
    # budget would allow one run per round, and one disturbed sample would stand as the median
    assert runs_per_round(8.0, 3.0) == MIN_RUNS_PER_ROUND >= 5
    assert runs_per_round(8.0, 1e9) == MIN_RUNS_PER_ROUND
    assert runs_per_round(0.0, 0.0) == MIN_RUNS_PER_ROUND
