"""``compare`` says IFCA's misclustering once: the note, with the oracle-best restart's line
only where some restart did better than the chosen one."""

from fedclust_jax.cli import main


def test_the_misclustering_note_is_printed_once(capsys):
    code = main(["compare", "--algorithms", "fedavg,ifca", "--data", "num_clients=20",
                 "--data", "dim=20", "--rounds", "5", "--restarts", "2", "--no-progress"])
    assert code == 0
    out = capsys.readouterr().out.splitlines()
    after = out[next(i for i, line in enumerate(out) if line.startswith("ifca ")) + 1:]
    notes = [line for line in after if "misclust" in line]
    assert len(notes) == 1 and notes[0].startswith("note: ifca misclusters 0.50 of the "
                                                   "clients"), after
    # both restarts cluster alike: nothing to add about a better one
    assert not any("oracle best restart" in line for line in after), after
