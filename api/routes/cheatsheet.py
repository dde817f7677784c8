"""``GET /v1/cheatsheet`` (JSON, Markdown or HTML) and ``GET /v1/cheatsheet/value``."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

from api.deps import KnowledgeDep, ReadAccess
from api.errors import ApiError
from api.schemas import CheatSheetValuePublic, ErrorPublic

router = APIRouter(prefix="/v1", tags=["cheat-sheet"], dependencies=[ReadAccess])

_Name = Annotated[str | None, Query(max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")]
#: A workload class as the sheet names its rows (``chat @ 60 req/s, prompt 256, output 128``,
#: ``stdlib-docs-8k (N=6000, d=384)``), or any part of one.
_WorkloadClass = Annotated[str | None, Query(max_length=200,
                                             pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._:/@,=()-]*$")]
Tier = Annotated[str | None, Query(max_length=32, pattern=r"^[a-z][a-z0-9_-]*$",
                                   description="SLO tier, e.g. `strict`, `standard`, `relaxed`")]


Format = Literal["json", "markdown", "html"]
#: The media type of each format, in the order preferred when an Accept header ties.
MEDIA_TYPES: dict[str, Format] = {"application/json": "json", "text/markdown": "markdown",
                                  "text/html": "html"}


def negotiate(accept: str | None) -> Format:
    """The format an ``Accept`` header asks for (RFC 9110): each supported media type takes the
    q-value of the most specific range that matches it (``text/html`` over ``text/*`` over
    ``*/*``, so ``application/json;q=0`` excludes JSON even beside ``*/*``); the highest q wins,
    ties keep the order JSON, Markdown, HTML. No header gives JSON; a header that accepts none of
    them raises 406."""
    if not accept or not accept.strip():
        return "json"
    ranges: dict[str, float] = {}
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        media, q = fields[0].lower(), 1.0
        for param in fields[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = min(1.0, max(0.0, float(value)))
                except ValueError:
                    q = 0.0
        if media:
            ranges[media] = max(q, ranges.get(media, q))  # a range given twice keeps its best q
    best: tuple[float, int] | None = None
    chosen: Format | None = None
    for rank, (media_type, fmt) in enumerate(MEDIA_TYPES.items()):
        kind = media_type.split("/")[0]
        q = next((ranges[r] for r in (media_type, f"{kind}/*", "*/*") if r in ranges), 0.0)
        if q > 0 and (best is None or (q, -rank) > best):
            best, chosen = (q, -rank), fmt
    if chosen is None:
        raise ApiError(406, "not_acceptable",
                       f"the cheat-sheet comes as {', '.join(MEDIA_TYPES)}; Accept asked for "
                       f"{accept[:200]!r}")
    return chosen


@router.get("/cheatsheet", responses={
    200: {"content": {"application/json": {}, "text/markdown": {}, "text/html": {}},
          "description": "the cheat-sheet in the asked format"},
    406: {"model": ErrorPublic, "description": "Accept names no format the sheet comes in"},
    422: {"model": ErrorPublic}})
def cheatsheet(knowledge: KnowledgeDep, target: _Name = None, hardware: _Name = None,
               model: _Name = None, workload_class: _WorkloadClass = None, tier: Tier = None,
               format: Annotated[Format | None, Query(
                   description="json, markdown or html; without it the Accept header decides "
                               "(default json)")] = None,
               accept: Annotated[str | None, Header(max_length=1000)] = None) -> Response:
    """The tuning cheat-sheet: recommended knob values per target x hardware x model x workload
    class x SLO tier, with predicted metrics, knob importance and fitted rules of thumb. `html`
    is a self-contained page with the table and SVG plots. `?format=` wins over `Accept`."""
    chosen = format or negotiate(accept)
    sheet = knowledge.cheatsheet(target=target, hardware=hardware, model=model,
                                 workload_class=workload_class, tier=tier)
    vary = {"Vary": "Accept"}
    if chosen == "markdown":
        return PlainTextResponse(sheet.to_markdown(), media_type="text/markdown", headers=vary)
    if chosen == "html":
        return HTMLResponse(sheet.to_html(), headers=vary)
    return JSONResponse(sheet.to_dict(), headers=vary)


@router.get("/cheatsheet/value", response_model=CheatSheetValuePublic,
            responses={404: {"model": ErrorPublic, "description": "no row for that context"},
                       422: {"model": ErrorPublic}})
async def cheatsheet_value(knowledge: KnowledgeDep,
                     knob: Annotated[str, Query(min_length=1, max_length=64,
                                                pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")],
                     target: Annotated[str, Query(min_length=1, max_length=64,
                                                  pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")],
                     hardware: _Name = None, model: _Name = None,
                     workload_class: _WorkloadClass = None, tier: Tier = "standard"
                     ) -> Response:
    """One knob's recommended value for a context, from the cached cheat-sheet (a lookup)."""
    query = {"knob": knob, "target": target, "hardware": hardware, "model": model,
             "workload_class": workload_class, "tier": tier or "standard"}
    answer = knowledge.cached_knob_value(query)
    if answer is None:
        answer = await run_in_threadpool(knowledge.knob_value, query)
    return Response(answer, media_type="application/json")
