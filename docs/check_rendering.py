"""Check the built documentation site as a reader sees it: every page in headless Chromium, offline.

    python docs/check_rendering.py [--no-build] [--width 1280] [--html docs/_build/html]
                                   [--out docs/_build/screenshots]

Builds the site (``python -m sphinx -W -q -b html docs docs/_build/html``) unless ``--no-build``,
opens every page at a 1280 px wide window with the network shut off, waits for MathJax, saves a
full-page screenshot of each into ``docs/_build/screenshots/`` and fails (exit 1) when a page

- requests anything over the network (a CDN script or font: offline it would be missing);
- shows a formula as raw LaTeX (a ``\\(`` or ``\\[`` left in the text, or math that MathJax did not
  typeset);
- has a code block, table, formula or signature wider than the text column, or one that needs
  horizontal scrolling to be read at this width (its right part hidden in a screenshot).

Needs Chromium (Debian: ``apt-get install chromium``); without it the check is skipped with a
message (exit 0), so that a machine without a browser can still build the docs. Uses only the
standard library: Chromium is driven over its DevTools protocol on a pipe.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

DOCS = pathlib.Path(__file__).resolve().parent
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

# Flags that keep a headless Chromium from reaching the network on its own, plus a proxy on a
# closed local port so that any page request fails (and is reported by the check).
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
    "--hide-scrollbars",
    "--proxy-server=http://127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
    "--remote-debugging-pipe",
]

WAIT_FOR_MATH = """(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  if (document.fonts) { await document.fonts.ready; }
  return true;
})()"""

# Runs in the page; returns a list of problems (strings).
FIND_PROBLEMS = r"""(() => {
  const problems = [];
  const text = el => (el.innerText || el.textContent || "").trim().replace(/\s+/g, " ").slice(0, 70);
  const where = el => {
    const section = el.closest("section[id]");
    return (section ? "#" + section.id + ": " : "") + el.tagName.toLowerCase();
  };
  // 1. raw LaTeX: delimiters or commands left in the page text outside code
  const latex = /\\\(|\\\[|\$\$|\\(frac|sum|log|mathrm|operatorname|cdot|left|right|min|max|mid|geq|leq)\b/;
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  let node;
  while ((node = walker.nextNode())) {
    const parent = node.parentElement;
    if (!parent || parent.closest("pre, code, script, style, textarea, mjx-container, .highlight, kbd")) continue;
    if (latex.test(node.data)) problems.push(`raw LaTeX in ${where(parent)}: "${node.data.trim().slice(0, 70)}"`);
  }
  document.querySelectorAll(".math").forEach(el => {
    if (!el.querySelector("mjx-container")) problems.push(`formula not typeset in ${where(el)}: "${text(el)}"`);
  });
  // 2. content wider than the text column, or needing horizontal scrolling
  const column = document.querySelector("div.body") || document.body;
  const right = column.getBoundingClientRect().right;
  const selectors = "pre, table, .math, mjx-container[display], dl > dt.sig, img";
  column.querySelectorAll(selectors).forEach(el => {
    const box = el.getBoundingClientRect();
    if (box.width === 0) return;
    if (el.scrollWidth > el.clientWidth + 1 && el.clientWidth > 0) {
      const hidden = el.scrollWidth - el.clientWidth;
      problems.push(`${where(el)} needs horizontal scrolling (${hidden} px hidden): "${text(el)}"`);
    }
    if (box.right > right + 1) {
      problems.push(`${where(el)} extends ${Math.round(box.right - right)} px past the text column: "${text(el)}"`);
    }
  });
  return problems;
})()"""


class Chromium:
    """A headless Chromium driven over the DevTools protocol on a pipe (fd 3: commands in, fd 4:
    answers and events out; messages are JSON ending in a NUL byte)."""

    def __init__(self, executable: str, profile: str):
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()

        def descriptors():  # in the child, before exec: the pipe ends on fds 3 and 4 (inheritable)
            read = fcntl.fcntl(to_browser_read, fcntl.F_DUPFD, 10)  # out of the way of 3 and 4 first
            write = fcntl.fcntl(from_browser_write, fcntl.F_DUPFD, 10)
            os.dup2(read, 3)
            os.dup2(write, 4)

        self.process = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            close_fds=False,
            preexec_fn=descriptors,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 60) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self.events.append(answer)

    def wait_for(self, method: str, session: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for index, event in enumerate(self.events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return self.events.pop(index)
            self.events.append(self._read_message(deadline))

    def close(self):
        try:
            self.send("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        os.close(self._to_browser)
        os.close(self._from_browser)


def evaluate(browser: Chromium, session: str, expression: str):
    result = browser.send(
        "Runtime.evaluate", {"expression": expression, "awaitPromise": True, "returnByValue": True}, session
    )
    if "exceptionDetails" in result:
        raise RuntimeError(f"script failed in the page: {result['exceptionDetails']}")
    return result["result"].get("value")


def check_pages(
    browser: Chromium, pages: list[pathlib.Path], html: pathlib.Path, out: pathlib.Path, width: int
) -> dict[str, list[str]]:
    target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Page", "Network", "Runtime"):
        browser.send(f"{domain}.enable", session=session)
    browser.send(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False},
        session,
    )
    problems = {}
    for page in pages:
        name = page.relative_to(html).as_posix()
        browser.events.clear()
        browser.send("Page.navigate", {"url": page.as_uri()}, session)
        browser.wait_for("Page.loadEventFired", session)
        evaluate(browser, session, WAIT_FOR_MATH)
        found = evaluate(browser, session, FIND_PROBLEMS)
        requests = [
            event["params"]["request"]["url"]
            for event in browser.events
            if event.get("method") == "Network.requestWillBeSent" and event.get("sessionId") == session
        ]
        found += [
            f"requests {url} (not available offline)"
            for url in requests
            if not url.startswith(("file:", "data:", "about:", "blob:"))
        ]
        height = evaluate(browser, session, "Math.ceil(document.documentElement.scrollHeight)")
        shot = browser.send(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": width, "height": min(height, 16000), "scale": 1},
            },
            session,
        )
        target_file = out / (name.replace("/", "__").removesuffix(".html") + ".png")
        target_file.write_bytes(base64.b64decode(shot["data"]))
        problems[name] = found
        print(f"{'ok  ' if not found else 'FAIL'} {name} ({height} px) -> {target_file.relative_to(out.parent)}")
        for problem in found:
            print(f"       {problem}")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", default=str(DOCS / "_build" / "html"))
    parser.add_argument("--out", default=str(DOCS / "_build" / "screenshots"))
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--no-build", action="store_true", help="check the site already built in --html")
    parser.add_argument("--browser", default=os.environ.get("CHROMIUM"), help="the Chromium executable")
    args = parser.parse_args(argv)
    executable = args.browser or next((path for path in map(shutil.which, BROWSERS) if path), None)
    if not executable:
        print("check_rendering: skipped, no Chromium found (Debian: apt-get install chromium; or pass --browser)")
        return 0
    html, out = pathlib.Path(args.html).resolve(), pathlib.Path(args.out).resolve()
    if not args.no_build:
        subprocess.run([sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(DOCS), str(html)], check=True)
    pages = sorted(
        path for path in html.rglob("*.html") if "_static" not in path.parts and path.name != "genindex.html"
    )
    if not pages:
        print(f"check_rendering: no pages in {html}")
        return 1
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="check_rendering_profile_") as profile:
        browser = Chromium(executable, profile)
        try:
            problems = check_pages(browser, pages, html, out, args.width)
        finally:
            browser.close()
    failed = {page: found for page, found in problems.items() if found}
    print(
        f"\n{len(pages)} pages at {args.width} px, offline: "
        + ("no problem found" if not failed else f"{sum(map(len, failed.values()))} problems on {len(failed)} pages")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
