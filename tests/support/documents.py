"""Hostile documents for the bounded YAML and JSON loaders."""


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """A YAML flow list of ``levels`` lists, each of ``width`` aliases of the one before: as a
    value it names about width**levels scalars in a few hundred bytes."""
    items = ["&l0 [" + ", ".join(["x"] * width) + "]"]
    items += [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "[" + ", ".join(items) + "]"
