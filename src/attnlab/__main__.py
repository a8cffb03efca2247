from attnlab.app.cli import entry

entry()
