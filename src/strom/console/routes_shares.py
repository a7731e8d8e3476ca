"""Pages: share groups (KIP-932 queues): their members, start offsets and lag, deletion.

The group's name travels in the query string (``/share-group?name=...``) as consumer groups'
do. Deleting asks for the name typed again, and the broker refuses a group with members.
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from strom.admin.errors import InvalidInputError
from strom.console.web import console, form, redirect


def _name(request: Request) -> str:
    name = request.query_params.get("name", "")
    if not name:
        raise InvalidInputError("no share group named: add ?name=...")
    return name


def share_groups(request: Request) -> Response:
    c = console(request)
    return c.page(request, "share_groups.html", groups=c.cluster.share_groups())


def share_group(request: Request) -> Response:
    c = console(request)
    name = _name(request)
    return c.page(request, "share_group.html", group=c.cluster.share_group(name), name=name)


def delete_confirm(request: Request) -> Response:
    name = _name(request)
    return console(request).page(
        request, "confirm.html", what="share group", name=name,
        action=f"/share-group/delete?{request.url.query}",
        cancel=f"/share-group?{request.url.query}",
        consequence="Its delivery state (start offsets, acknowledged and archived records) is "
                    "removed: its next consumers start where share.auto.offset.reset says. "
                    "The group must have no members.")  # fmt: skip


async def delete(request: Request) -> Response:
    name = _name(request)
    if (await form(request)).get("confirm") != name:
        raise InvalidInputError(f"not deleted: type the group name {name!r} to confirm")

    def work() -> Response:
        console(request).cluster.delete_share_group(name)
        return redirect("/share-groups", ok=f"Deleted share group {name}.")

    return await run_in_threadpool(work)


def routes() -> list[Route]:
    return [
        Route("/share-groups", share_groups),
        Route("/share-group", share_group),
        Route("/share-group/delete", delete_confirm, methods=["GET"]),
        Route("/share-group/delete", delete, methods=["POST"]),
    ]
