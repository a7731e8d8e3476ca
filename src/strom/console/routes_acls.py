"""Pages: ACLs — the list (DescribeAcls), and, unless the console is read-only, adding one and
deleting one (CreateAcls / DeleteAcls through :mod:`strom.admin.acls`).

A broker without an authorizer answers SECURITY_DISABLED: the page says so instead of an empty
list (an empty list would read as "nothing is allowed", the opposite of the truth).
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from strom.admin import acls
from strom.admin.errors import RefusedError
from strom.console.web import console, form, redirect

FIELDS = ("resource_type", "name", "pattern_type", "principal", "host", "operation", "permission")


def acl_list(request: Request) -> Response:
    c = console(request)
    disabled = None
    try:
        rows = acls.describe(c.cluster.session, acls.filters(acls.AclSpec(pattern_type="any")))
    except RefusedError as exc:
        if "SECURITY_DISABLED" not in exc.message:
            raise
        rows, disabled = [], exc.message
    return c.page(request, "acls.html", acls=rows, disabled=disabled)


def _spec(values: dict[str, str]) -> acls.AclSpec:
    kind = values.get("resource_type", "topic")
    name = values.get("name", "").strip()
    principal = values.get("principal", "").strip()
    host = values.get("host", "").strip() or "*"
    allow = values.get("permission", "allow") == "allow"
    return acls.AclSpec(
        allow_principals=[principal] if allow else [], deny_principals=[] if allow else [principal],
        allow_hosts=[host] if allow else [], deny_hosts=[] if allow else [host],
        operations=[values.get("operation", "All")],
        topics=[name] if kind == "topic" else [], groups=[name] if kind == "group" else [],
        transactional_ids=[name] if kind == "transactional_id" else [],
        cluster=kind == "cluster", pattern_type=values.get("pattern_type", "literal"),
    )  # fmt: skip


async def create(request: Request) -> Response:
    values = await form(request)

    def work() -> Response:
        made = acls.bindings(_spec(values))
        acls.create(console(request).cluster.session, made)
        return redirect("/acls", ok=f"Added {len(made)} ACL(s).")

    return await run_in_threadpool(work)


async def delete(request: Request) -> Response:
    values = await form(request)

    def work() -> Response:
        row = acls.AclRow(*(values.get(f, "") for f in FIELDS))
        removed = acls.delete(console(request).cluster.session, [acls.exact_filter(row)])
        return redirect("/acls", ok=f"Deleted {len(removed)} ACL(s).")

    return await run_in_threadpool(work)


def routes() -> list[Route]:
    return [
        Route("/acls", acl_list),
        Route("/acls", create, methods=["POST"]),
        Route("/acls/delete", delete, methods=["POST"]),
    ]
