"""Pages from the package's templates (Jinja2, escaping every value it prints).

Nothing is fetched from elsewhere: the stylesheet is the package's own (``static/``), and
no page runs a script, so the console works offline and a value an agent wrote can never
run in the person's browser.
"""

from __future__ import annotations

from datetime import UTC, datetime
from importlib.resources import files
from typing import Any

from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from memq import tenants
from memq.printable import printable

ENVIRONMENT = Environment(
    loader=PackageLoader("memq.server.console", "templates"),
    autoescape=select_autoescape(default=True),
    undefined=StrictUndefined,  # a missing value is a bug of the page, not a blank
    trim_blocks=True, lstrip_blocks=True,
)
# Ids are agents' text: a bidirectional override or a control character in one is shown
# as its escape, so one id cannot pass for another.
ENVIRONMENT.filters["name"] = lambda stored: (
    printable(tenants.split(stored)[1], one_line=True) if stored else "")
ENVIRONMENT.filters["printable"] = lambda text: printable(str(text))
ENVIRONMENT.filters["when"] = lambda at: _when(at)

SECURITY_HEADERS = {
    # No script, no frame, no foreign style: what a page can do if a value slipped through.
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: under no-referrer a form sends "Origin: null", which
    # the guard (rightly) refuses.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def page(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    html = ENVIRONMENT.get_template(template).render(**context)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def stylesheet() -> bytes:
    return files("memq.server.console").joinpath("static", "console.css").read_bytes()


def _when(at: str | None) -> str:
    """An RFC 3339 time to the second, in UTC, as a person reads it."""
    if not at:
        return "-"
    try:
        moment = datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        return at
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
