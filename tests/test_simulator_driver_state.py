"""The simulated driver's saved energy counters: written in place, read back whole."""

from __future__ import annotations

import os

from gpustats.simulator.driver_state import DriverStateWriter, load_driver_state


def test_a_shorter_save_after_a_longer_one_reads_back_as_itself(tmp_path):
    path = str(tmp_path / "state" / "simulated-driver.json")
    writer = DriverStateWriter(path)
    writer.save(100.0, 1, {f"GPU-{i}": 123456789.5 * i for i in range(8)})
    writer.save(200.0, 2, {"GPU-0": 5.0})
    writer.close()
    assert load_driver_state(path) == (200.0, 2, {"GPU-0": 5.0})


def test_a_new_writer_pads_to_what_an_earlier_one_left(tmp_path):
    path = str(tmp_path / "simulated-driver.json")
    first = DriverStateWriter(path)
    first.save(1.0, 0, {f"GPU-{i}": 1e12 for i in range(8)})
    first.close()
    second = DriverStateWriter(path)           # a restarted daemon's simulator
    second.save(2.0, 0, {"GPU-0": 7.0})
    second.close()
    assert load_driver_state(path) == (2.0, 0, {"GPU-0": 7.0})


def test_a_symlink_in_its_place_is_not_written_through(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    path = tmp_path / "simulated-driver.json"
    os.symlink(target, path)
    writer = DriverStateWriter(str(path))
    writer.save(1.0, 0, {"GPU-0": 1.0})          # refused and logged, not raised
    writer.close()
    assert target.read_text() == "keep"


def test_a_failed_save_is_retried_at_the_next(tmp_path):
    blocker = tmp_path / "state"
    blocker.write_text("")                       # a file where the directory should be
    path = str(blocker / "simulated-driver.json")
    writer = DriverStateWriter(path)
    writer.save(1.0, 0, {"GPU-0": 1.0})
    blocker.unlink()
    writer.save(2.0, 0, {"GPU-0": 2.0})
    writer.close()
    assert load_driver_state(path) == (2.0, 0, {"GPU-0": 2.0})
