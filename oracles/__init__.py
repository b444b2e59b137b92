"""Ground truth for the simulated world, shared by the tests and the benchmarks.

``world`` is the world the chaos run edits (GPUs, pods, processes, on fake host trees);
``energy`` works out from the simulator's trace what each pod should have been billed;
``idle`` learns a GPU's idle as the daemon is specified to; ``checks`` holds the invariants
checked on every scrape (conservation, counters that never go back, rates a GPU can give).
Tests and benchmarks both import these; neither imports the other's code for them.
"""
