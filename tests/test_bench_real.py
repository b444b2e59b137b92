"""bench.real runs end to end (against the simulator here; a GPU host uses the real NVML)."""

import json

import pynvml

from bench.real import main


def test_bench_real_reports_calls_and_the_tick_split(tmp_path, capsys):
    out = tmp_path / "real.json"
    assert main(["--ticks", "4", "--interval", "0.12", "--simulate-gpus", "2",
                 "--simulate-processes", "4", "--energy-every", "2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "tick CPU split" in printed and "NVML function" in printed
    result = json.loads(out.read_text())
    names = {f["function"] for f in result["nvml_functions"]}
    assert any(n.startswith("nvmlDeviceGetFieldValues (") and "energy" in n for n in names)
    assert any(n.startswith("nvmlDeviceGetFieldValues (") and "energy" not in n for n in names)
    assert "nvmlDeviceGetTotalEnergyConsumption" not in names
    split = result["tick_cpu_split_ms_median"]
    assert {"GPU sweep: NVML calls", "GPU sweep: Python around them", "energy accounting",
            "snapshot build and the rest"} <= set(split)
    assert result["nvml_calls_per_gpu_per_tick"] > 0
    assert not hasattr(pynvml.nvmlDeviceGetFieldValues, "__wrapped__")   # profile removed


def test_bench_real_without_field_values_reads_one_by_one(tmp_path):
    out = tmp_path / "real.json"
    assert main(["--ticks", "3", "--interval", "0", "--simulate-gpus", "1",
                 "--without-field-values", "--json", str(out)]) == 0
    names = {f["function"] for f in json.loads(out.read_text())["nvml_functions"]}
    assert "nvmlDeviceGetTotalEnergyConsumption" in names
    assert "nvmlDeviceGetPowerUsage" in names and "nvmlDeviceGetViolationStatus" in names
    assert not any(n.startswith("nvmlDeviceGetFieldValues") for n in names)
