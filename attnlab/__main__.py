from attnlab.cli import entry

entry()
