"""The live console: a small web app over the project's Redis (Starlette, SSE, no build step).

    auth.py     the token (a link once, then a cookie and a key in the pages' URLs, neither
                of which opens anything alone), the host and same-origin checks, the
                security headers (a CSP with a nonce)
    views.py    what a page shows (the report's DAG drawing, live, or past 300 units the
                units by level, paged; a unit's page from that unit's keys only)
    render.py   jinja2 with autoescape: every text from models and projects is escaped
    shape.py    a project's graph, kept while its units.json stays the same
    summary.py  a project's live counts and calls in memory, updated per changed unit
    hub.py      one follower per project: reads its streams once, renders the live
                fragments once per batch of changes (at most 4 a second) for every page
    sse.py      the event streams' positions and the unit page's stream; stream ids are the
                SSE ids, so a reconnect resumes where it stopped (or reloads the page)
    app.py      the pages and the actions people take (through callbacks: no Celery here)
    server.py   uvicorn on 127.0.0.1 by default
    address.py  the address, the link to print, the host names it answers to

The app is imported from devloop.console.app, not from here: a command that only prints a
console link or mints a token then loads neither Starlette nor uvicorn.
"""
