"""Issue 43 (4): a record written by a newer attnlab (an extra key, a future format_version) is read
where its fields are known, with one warning line naming the rest; never dropped silently."""

from __future__ import annotations

import json

import attnlab
from attnlab.app.cli import main as cli_main
from attnlab.record import FORMAT_VERSION


def test_compare_reads_a_newer_record_and_names_what_it_did_not_read(tmp_path, capsys) -> None:
    attnlab.run("unscaled", out_dir=tmp_path / "job", log={"tensorboard": False, "html": False})
    path = tmp_path / "job" / "record.json"
    data = json.loads(path.read_text())
    data["format_version"] = 99
    data["calibration"] = {"ece": 0.1}
    data["findings"][0]["confidence"] = 0.9
    path.write_text(json.dumps(data))
    capsys.readouterr()
    assert cli_main(["compare", str(tmp_path), "--out", str(tmp_path / "table.csv")]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "newer attnlab" in line]
    assert warnings == [f"attnlab: warning: {path}: written by a newer attnlab (format_version 99, this attnlab reads "
                        f"up to {FORMAT_VERSION}; not read: calibration, findings[].confidence); read with the fields this one knows"]
    table = (tmp_path / "table.csv").read_text()
    assert "unscaled" in table and data["findings"][0]["code"] in table
