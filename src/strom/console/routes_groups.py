"""Pages: consumer groups (lag, members, offset reset with a dry run, delete) and connectors.

Group and connector names may hold any character (``/`` too), so they travel in the query
string (``/group?name=...``), not in the path.

An offset reset is two steps: the form posts a *dry run*, which changes nothing and shows the
plan (current and new offset per partition); its "Apply" button posts exactly that plan back,
so what is committed is what the user saw, even if the log moved in between.
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from strom.admin.errors import InvalidInputError
from strom.console.cluster import RESET_STRATEGIES
from strom.console.web import console, form, redirect


def _name(request: Request) -> str:
    name = request.query_params.get("name", "")
    if not name:
        raise InvalidInputError("no group or connector named: add ?name=...")
    return name


def groups(request: Request) -> Response:
    c = console(request)
    return c.page(request, "groups.html", groups=c.cluster.groups())


def group(request: Request) -> Response:
    c = console(request)
    name = _name(request)
    info = c.cluster.group(name)
    topics = sorted({r["topic"] for r in info["partitions"]})
    return c.page(request, "group.html", group=info, name=name,
                  strategies=RESET_STRATEGIES, topics=topics)


async def reset_dry_run(request: Request) -> Response:
    name = _name(request)
    f = await form(request)
    topic = str(f.get("topic") or "") or None
    strategy = str(f.get("strategy") or "")
    value = str(f.get("value") or "")

    def work() -> Response:
        c = console(request)
        plan = c.cluster.reset_plan(name, topic, strategy, value)
        encoded = "\n".join(f"{r['topic']}:{r['partition']}:{r['new_offset']}" for r in plan)
        return c.page(request, "reset_plan.html", name=name, plan=plan, encoded=encoded,
                      strategy=strategy, value=value, topic=topic)

    return await run_in_threadpool(work)


def parse_plan(text: str) -> dict[tuple[str, int], int]:
    """``topic:partition:offset`` lines (the dry run's hidden field) to the reset targets."""
    targets: dict[tuple[str, int], int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        topic, _, rest = line.strip().rpartition(":")
        topic, _, partition = topic.rpartition(":")
        try:
            targets[(topic, int(partition))] = int(rest)
        except ValueError:
            raise InvalidInputError(f"invalid reset plan line {line!r}") from None
        if not topic:
            raise InvalidInputError(f"invalid reset plan line {line!r}")
    return targets


async def reset_apply(request: Request) -> Response:
    name = _name(request)
    targets = parse_plan(str((await form(request)).get("plan") or ""))

    def work() -> Response:
        console(request).cluster.apply_reset(name, targets)
        return redirect("/group", name=name,
                        ok=f"Reset {len(targets)} committed offset(s) of group {name}.")

    return await run_in_threadpool(work)


def group_delete_confirm(request: Request) -> Response:
    name = _name(request)
    return console(request).page(
        request, "confirm.html", what="consumer group", name=name,
        action=f"/group/delete?{request.url.query}", cancel=f"/group?{request.url.query}",
        consequence="Its committed offsets are removed: its consumers will start from their "
                    "auto.offset.reset position. The group must have no members.")


async def group_delete(request: Request) -> Response:
    name = _name(request)
    if (await form(request)).get("confirm") != name:
        raise InvalidInputError(f"not deleted: type the group name {name!r} to confirm")

    def work() -> Response:
        console(request).cluster.delete_group(name)
        return redirect("/groups", ok=f"Deleted consumer group {name}.")

    return await run_in_threadpool(work)


def connectors(request: Request) -> Response:
    c = console(request)
    if c.connect is None:
        raise InvalidInputError("no Connect worker configured: start the console with --connect-url")
    return c.page(request, "connectors.html", connectors=c.connect.connectors(),
                  url=c.connect.url)


async def connector_action(request: Request) -> Response:
    f = await form(request)
    name = str(f.get("name") or "")
    action = str(f.get("action") or "")
    task_text = str(f.get("task") or "")

    def work() -> Response:
        c = console(request)
        if c.connect is None:
            raise InvalidInputError("no Connect worker configured: start the console with --connect-url")
        task = int(task_text) if task_text.isdigit() else None
        c.connect.action(name, action, task)
        what = f"task {task} of connector {name}" if task is not None else f"connector {name}"
        return redirect("/connectors", ok=f"Asked to {action} {what}.")

    return await run_in_threadpool(work)


def routes() -> list[Route]:
    return [
        Route("/groups", groups),
        Route("/group", group),
        Route("/group/reset", reset_dry_run, methods=["POST"]),
        Route("/group/reset/apply", reset_apply, methods=["POST"]),
        Route("/group/delete", group_delete_confirm),
        Route("/group/delete", group_delete, methods=["POST"]),
        Route("/connectors", connectors),
        Route("/connectors/action", connector_action, methods=["POST"]),
    ]
