"""A hostile client over raw HTTP (`Hostile`: any event, any session hash, any JSON) and the app as a server process (`Server`).

Raw calls see what a public Space sees: Gradio's queue takes any session hash and any JSON from anyone.
Never imports a test module.
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import httpx

from .app import REPO, free_port


class Hostile:
    """Raw HTTP to one running app: any event by its index, any session hash, any JSON."""

    def __init__(self, url: str) -> None:
        self.url = url
        config = httpx.get(f"{url}config", timeout=30).json()  # what the page itself reads
        self.index = {d["api_name"]: d["id"] for d in config["dependencies"] if d.get("api_name")}

    def call(self, api_name: str, data, session_hash: str, timeout: float = 120) -> dict:
        """Join the queue as the browser does and return the last message: {"success", "output"}."""
        body = json.dumps({"data": data, "fn_index": self.index[api_name], "session_hash": session_hash,
                           "event_data": None, "trigger_id": None}, allow_nan=True)
        joined = httpx.post(f"{self.url}gradio_api/queue/join", content=body,
                            headers={"content-type": "application/json"}, timeout=30)
        if joined.status_code != 200:
            return {"success": False, "output": {"error": joined.text}, "status": joined.status_code}
        query = urllib.parse.urlencode({"session_hash": session_hash})
        last = None
        with httpx.stream("GET", f"{self.url}gradio_api/queue/data?{query}", timeout=timeout) as stream:
            for line in stream.iter_lines():
                if not line.startswith("data:"):
                    continue
                message = json.loads(line[5:])
                if message.get("msg") == "process_completed":
                    last = message
                if message.get("msg") == "close_stream" or last is not None:
                    break
        assert last is not None, f"no answer from /{api_name}"
        return last

    def ok(self, api_name: str, data, session_hash: str) -> list:
        answer = self.call(api_name, data, session_hash)
        assert answer["success"], answer
        return answer["output"]["data"]

    def error(self, api_name: str, data, session_hash: str) -> str:
        answer = self.call(api_name, data, session_hash)
        assert not answer["success"], answer
        message = (answer.get("output") or {}).get("error")
        assert message, f"/{api_name} failed with an empty error: {answer}"
        return message

    def close_page(self, session_hash: str) -> int:
        """What a closing tab does: its page's heartbeat stream ends, and Gradio runs the unload event
        (which frees the session) a moment later. Returns the stream's status: 404 when no page can
        have this hash (the route's one path segment holds no "/")."""
        segment = urllib.parse.quote(session_hash, safe="").replace(".", "%2E")  # ".." stays a name
        with httpx.stream("GET", f"{self.url}gradio_api/heartbeat/{segment}", timeout=30) as stream:
            if stream.status_code == 200:
                next(stream.iter_lines())  # "data: ALIVE": the page is open; leaving the block closes it
            return stream.status_code

    def upload(self, name: str, content: bytes) -> dict:
        """A file sent to Gradio's upload route, as the FileData an event takes."""
        answer = httpx.post(f"{self.url}gradio_api/upload", files={"files": (name, content)}, timeout=60)
        answer.raise_for_status()
        return {"path": answer.json()[0], "orig_name": name, "meta": {"_type": "gradio.FileData"}}


class Server:
    """`python -m playground [ARGS]` in its own process on a free port, with `store` as its state store;
    what it prints (its log) goes to the file `log` when given."""

    def __init__(self, store: Path, *args: str, log: Path | None = None, wait: bool = True) -> None:
        self.port = free_port()
        env = {**os.environ, "PLAYGROUND_STATE_DIR": str(store), "PYTHONPATH": str(REPO)}
        with open(log or os.devnull, "w") as output:  # the process keeps its own copy of the file
            self.process = subprocess.Popen([sys.executable, "-m", "playground", "--port", str(self.port), *args],
                                            cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}/"
        if wait:
            self.wait()

    def wait(self) -> None:
        """Until the server answers (it imports torch and gradio first: seconds)."""
        deadline = time.monotonic() + 90
        while True:
            assert self.process.poll() is None and time.monotonic() < deadline, "the server did not start"
            try:
                if httpx.get(f"{self.url}config", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        self.app = Hostile(self.url)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
