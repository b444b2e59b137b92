"""Pure data types: frozen dataclasses (``@record``), units in field names, ``None`` = absent."""
