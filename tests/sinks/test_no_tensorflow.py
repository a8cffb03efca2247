"""No import path pulls TensorFlow in, where it is installed (`llms-from-scratch` installs
it): a `tensorflow` that fails loudly on import sits on the path while every sink writes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

RUN = textwrap.dedent('''
    import sys
    import attnlab
    attnlab.run("unscaled", out_dir="single", n_seeds=2, log={"histograms": True})
    import attnlab.app.preload  # what every job's process imports first
    assert "tensorflow" not in sys.modules
''')


@pytest.mark.slow
def test_no_sink_imports_tensorflow(tmp_path):
    fake = tmp_path / "fake" / "tensorflow"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise RuntimeError("tensorflow was imported")\n')
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake")}
    done = subprocess.run([sys.executable, "-c", RUN], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "single" / "seed-124" / "record.json").is_file()
    assert list((tmp_path / "single").glob("events.out.tfevents.*"))
