"""The API surface: every string, quantity arithmetic, typed views of our objects."""
