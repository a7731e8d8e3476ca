"""Pages: overview, topics (list, page, create, configs, delete) and the message browser.

GET handlers are sync (Starlette's thread pool runs the blocking client calls); POST handlers
read their form, then run the work in the thread pool, and answer 303 to the page showing the
result (``?ok=...`` notice).
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from strom.admin.errors import InvalidInputError
from strom.admin.topics import parse_settings
from strom.console import messages
from strom.console.throughput import HEIGHT, WIDTH, sparkline_points
from strom.console.web import console, form, optional_int, redirect


def _throughput(request: Request) -> dict[str, Any]:
    sampler = console(request).sampler
    rates = sampler.rates() if sampler is not None else []
    return {"points": sparkline_points(rates), "width": WIDTH, "height": HEIGHT,
            "current": rates[-1] if rates else None, "peak": max(rates) if rates else None,
            "interval": sampler.interval if sampler is not None else None,
            "samples": len(rates)}


def overview(request: Request) -> Response:
    c = console(request)
    return c.page(request, "overview.html", info=c.cluster.overview(),
                  throughput=_throughput(request))


def throughput_fragment(request: Request) -> Response:
    return console(request).page(request, "_throughput.html", throughput=_throughput(request))


def topics(request: Request) -> Response:
    c = console(request)
    internal = request.query_params.get("internal") == "1"
    rows = [r for r in c.cluster.topics() if internal or not r["internal"]]
    return c.page(request, "topics.html", topics=rows, internal=internal)


def topic_new(request: Request) -> Response:
    return console(request).page(request, "topic_new.html")


async def topic_create(request: Request) -> Response:
    f = await form(request)
    name = (f.get("name") or "").strip()
    partitions = optional_int(str(f.get("partitions") or ""), "partition count")
    replication = optional_int(str(f.get("replication") or ""), "replication factor")
    configs = parse_settings([line.strip() for line in str(f.get("configs") or "").splitlines()
                              if line.strip()])

    def work() -> Response:
        console(request).cluster.create_topic(
            str(name), -1 if partitions is None else partitions,
            -1 if replication is None else replication, configs)
        return redirect(f"/topics/{name}", ok=f"Created topic {name}.")

    return await run_in_threadpool(work)


def topic(request: Request) -> Response:
    c = console(request)
    name = request.path_params["name"]
    return c.page(request, "topic.html", topic=c.cluster.topic(name), name=name,
                  query=messages.Query(topic=name))


async def topic_config(request: Request) -> Response:
    name = request.path_params["name"]
    f = await form(request)
    key = str(f.get("key") or "")
    value = None if f.get("action") == "reset" else str(f.get("value") or "")

    def work() -> Response:
        console(request).cluster.alter_topic_config(name, key, value)
        verb = "Reset" if value is None else "Set"
        shown = "" if value is None else f" = {value}"
        return redirect(f"/topics/{name}", ok=f"{verb} {key}{shown}.")

    return await run_in_threadpool(work)


def topic_delete_confirm(request: Request) -> Response:
    name = request.path_params["name"]
    return console(request).page(request, "confirm.html", what="topic", name=name,
                                 action=f"/topics/{name}/delete", cancel=f"/topics/{name}",
                                 consequence="Every partition and message of this topic is "
                                             "removed. This cannot be undone.")


async def topic_delete(request: Request) -> Response:
    name = request.path_params["name"]
    f = await form(request)
    if f.get("confirm") != name:
        raise InvalidInputError(f"not deleted: type the topic name {name!r} to confirm")

    def work() -> Response:
        console(request).cluster.delete_topic(name)
        return redirect("/topics", ok=f"Deleted topic {name}.")

    return await run_in_threadpool(work)


def browse(request: Request) -> Response:
    c = console(request)
    name = request.path_params["name"]
    q = messages.Query.from_params(name, request.query_params)
    page = messages.browse(c.cluster, q)
    md = c.cluster.metadata().topics.get(name)
    partitions = sorted(md.partitions) if md is not None and md.error is None else []
    return c.page(request, "messages.html", name=name, q=q, page=page, partitions=partitions,
                  modes=messages.MODES, views=messages.VIEWS,
                  next_params=q.params(cursor=page.next_cursor),
                  export_params=q.params())


def export(request: Request) -> Response:
    c = console(request)
    name = request.path_params["name"]
    fmt = request.query_params.get("format", "json")
    if fmt not in ("json", "csv"):
        raise InvalidInputError(f"unknown export format {fmt!r}: json or csv")
    page = messages.browse(c.cluster, messages.Query.from_params(name, request.query_params))
    if fmt == "csv":
        body, media = messages.export_csv(page), "text/csv; charset=utf-8"
    else:
        body, media = messages.export_json(page), "application/json"
    return Response(body, media_type=media, headers={
        "Content-Disposition": f'attachment; filename="{name}-messages.{fmt}"'})


async def produce(request: Request) -> Response:
    name = request.path_params["name"]
    f = await form(request)
    partition = optional_int(str(f.get("partition") or ""), "partition")
    key = str(f.get("key") or "")
    value = None if f.get("tombstone") else str(f.get("value") or "")
    headers = messages.parse_headers(str(f.get("headers") or ""))

    def work() -> Response:
        p, offset = messages.produce(console(request).cluster, name, key or None, value,
                                     partition, headers)
        return redirect(f"/topics/{name}/messages", ok=f"Produced to partition {p} at offset "
                                                      f"{offset}.", mode="offset", offset=offset,
                        partition=p)

    return await run_in_threadpool(work)


def routes() -> list[Route]:
    return [
        Route("/", overview),
        Route("/fragments/throughput", throughput_fragment),
        Route("/topics", topics),
        Route("/topics", topic_create, methods=["POST"]),
        Route("/new-topic", topic_new),
        Route("/topics/{name}", topic),
        Route("/topics/{name}/config", topic_config, methods=["POST"]),
        Route("/topics/{name}/delete", topic_delete_confirm),
        Route("/topics/{name}/delete", topic_delete, methods=["POST"]),
        Route("/topics/{name}/messages", browse),
        Route("/topics/{name}/messages/export", export),
        Route("/topics/{name}/produce", produce, methods=["POST"]),
    ]
