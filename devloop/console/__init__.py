"""The live console: a small web app over the project's Redis (Starlette, SSE, no build step).

    auth.py     the token (a link once, then a cookie and a key in the pages' URLs, neither
                of which opens anything alone), the host and same-origin checks, the
                security headers (a CSP with a nonce)
    views.py    what a page shows, read from Redis (the report's DAG drawing, live)
    render.py   jinja2 with autoescape: every text from models and projects is escaped
    sse.py      one event stream per page, fed by XREAD BLOCK on the project's streams;
                stream ids are the SSE ids, so a reconnect resumes where it stopped
    app.py      the pages and the actions people take (through callbacks: no Celery here)
    server.py   uvicorn on 127.0.0.1 by default, and the link to print
"""

from devloop.console.app import Callbacks, ConsoleConfig, make_app

__all__ = ["Callbacks", "ConsoleConfig", "make_app"]
