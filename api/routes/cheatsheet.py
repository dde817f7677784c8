"""``GET /v1/cheatsheet`` (JSON, Markdown or HTML) and ``GET /v1/cheatsheet/value``."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

from api.deps import KnowledgeDep, ReadAccess
from api.schemas import CheatSheetValuePublic, ErrorPublic

router = APIRouter(prefix="/v1", tags=["cheat-sheet"], dependencies=[ReadAccess])

_Name = Annotated[str | None, Query(max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")]
Tier = Annotated[str | None, Query(max_length=32, pattern=r"^[a-z][a-z0-9_-]*$",
                                   description="SLO tier, e.g. `strict`, `standard`, `relaxed`")]


@router.get("/cheatsheet", responses={
    200: {"content": {"application/json": {}, "text/markdown": {}, "text/html": {}},
          "description": "the cheat-sheet in the asked format"},
    422: {"model": ErrorPublic}})
def cheatsheet(knowledge: KnowledgeDep, target: _Name = None, hardware: _Name = None,
               model: _Name = None, workload_class: _Name = None, tier: Tier = None,
               format: Literal["json", "markdown", "html"] = "json") -> Response:
    """The tuning cheat-sheet: recommended knob values per target x hardware x model x workload
    class x SLO tier, with predicted metrics, knob importance and fitted rules of thumb. `html`
    is a self-contained page with the table and SVG plots."""
    sheet = knowledge.cheatsheet(target=target, hardware=hardware, model=model,
                                 workload_class=workload_class, tier=tier)
    if format == "markdown":
        return PlainTextResponse(sheet.to_markdown(), media_type="text/markdown")
    if format == "html":
        return HTMLResponse(sheet.to_html())
    return JSONResponse(sheet.to_dict())


@router.get("/cheatsheet/value", response_model=CheatSheetValuePublic,
            responses={404: {"model": ErrorPublic, "description": "no row for that context"},
                       422: {"model": ErrorPublic}})
async def cheatsheet_value(knowledge: KnowledgeDep,
                     knob: Annotated[str, Query(min_length=1, max_length=64,
                                                pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")],
                     target: Annotated[str, Query(min_length=1, max_length=64,
                                                  pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")],
                     hardware: _Name = None, model: _Name = None,
                     workload_class: _Name = None, tier: Tier = "standard") -> Response:
    """One knob's recommended value for a context, from the cached cheat-sheet (a lookup)."""
    query = {"knob": knob, "target": target, "hardware": hardware, "model": model,
             "workload_class": workload_class, "tier": tier or "standard"}
    answer = knowledge.cached_knob_value(query)
    if answer is None:
        answer = await run_in_threadpool(knowledge.knob_value, query)
    return Response(answer, media_type="application/json")
