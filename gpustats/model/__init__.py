"""Pure data types: frozen dataclasses, units in field names, ``None`` means absent."""
