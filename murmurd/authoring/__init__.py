"""The Python authoring path: compile a Python artifact into a component."""
