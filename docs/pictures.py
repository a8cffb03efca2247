"""The guide's pictures, taken anew from real runs: `python docs/pictures.py [NAME ...]` (all by default).

Each picture is a command the guide shows, run in a temporary folder, then the page it made shot
in headless Chromium (`apt-get install chromium`) or the PNG attnlab drew copied as it is. Run it
after a change to what the pages or the heatmaps look like; the development guide says so.
"""

from __future__ import annotations

import base64
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

DOCS = Path(__file__).resolve().parent
BROWSER = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


def attnlab(folder: Path, *args: str) -> Path:
    """`python -m attnlab ARGS` in `folder`; returns the run's folder."""
    out = folder / "run"
    subprocess.run([sys.executable, "-m", "attnlab", *args, f"hydra.run.dir={out}"], cwd=folder, check=True,
                   capture_output=True, text=True)
    return out


def shoot(url: str, out: Path, profile: Path, width: int = 1280, height: int = 1000, wait_ms: int = 0) -> None:
    if BROWSER is None:
        raise SystemExit("docs/pictures.py needs Chromium (apt-get install chromium)")
    command = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--no-first-run", f"--user-data-dir={profile}", "--hide-scrollbars", "--force-device-scale-factor=1",
               f"--window-size={width},{height}", f"--screenshot={out}", url]
    if wait_ms:
        command.insert(-1, f"--virtual-time-budget={wait_ms}")  # TensorBoard draws from its own requests
    subprocess.run(command, capture_output=True, timeout=300, check=True)


def report_html(folder: Path) -> None:
    run = attnlab(folder, "variant=unscaled", "log.tensorboard=false")
    shoot((run / "report.html").as_uri(), DOCS / "report_html.png", folder / "profile", height=1400)


def tensorboard_heatmaps(folder: Path) -> None:
    run = attnlab(folder, "variant=wrong_softmax_axis", "log.html=false")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(run), "--host", "127.0.0.1",
                               "--port", str(port), "--load_fast", "false"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/data/runs", timeout=5).read()
                break
            except OSError:
                time.sleep(0.5)
        shoot(f"http://127.0.0.1:{port}/#images", DOCS / "tensorboard_heatmaps.png", folder / "profile",
              height=1200, wait_ms=20000)
    finally:
        server.terminate()
        server.wait(timeout=20)


def model_head_pictures(folder: Path) -> None:
    import attnlab
    from attnlab.sinks.model_html import head_grid_html, model_head_grid

    result = attnlab.run("multi_head_attention", overrides=[
        "model=hf:gpt2", "model.n_layer=2", "model.n_embd=64", "model.n_head=4", "inputs=text", "layer=0"],
        log={"tensorboard": False, "table": False, "html": False, "terminal": False})
    record = result.record
    (DOCS / "model_head_grid.png").write_bytes(model_head_grid(record).png)
    labelled = re.findall(r'src="data:image/png;base64,([^"]+)"', head_grid_html(record))[-1]
    (DOCS / "model_head_tokens.png").write_bytes(base64.b64decode(labelled))


PICTURES: dict[str, Callable[[Path], None]] = {
    "report_html": report_html,
    "tensorboard_heatmaps": tensorboard_heatmaps,
    "model_head": model_head_pictures,
}


def main(names: list[str]) -> None:
    unknown = [n for n in names if n not in PICTURES]
    if unknown:
        raise SystemExit(f"unknown picture(s) {', '.join(unknown)}; known: {', '.join(PICTURES)}")
    for name in names or list(PICTURES):
        with tempfile.TemporaryDirectory() as folder:
            PICTURES[name](Path(folder))
        print(f"docs: {name} taken")


if __name__ == "__main__":
    main(sys.argv[1:])
