"""The bug zoo: copies of the source's classes with one deliberate change each, and the finding it must trigger."""
