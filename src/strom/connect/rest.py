"""Kafka Connect's REST API over the herder (Starlette, served by uvicorn).

Status codes and bodies are Kafka Connect's: errors are ``{"error_code": status,
"message": ...}``; creation 201, pause/resume 202, delete/stop/plain restart 204, restart
with ``includeTasks``/``onlyFailed`` 202 with the connector's status.
Endpoints are plain functions: Starlette runs them in its thread pool, so the herder's lock
and task joins never block the event loop. A herder may raise
:class:`~strom.connect.forward.ForwardRequest` (distributed mode: not the leader, not the
task's owner): the request is then sent on to that worker as it came (``?forward=`` hop
protection, see :mod:`strom.connect.forward`) and its answer returned.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from strom.connect.forward import ForwardRequest, forward
from strom.connect.herder import RestError, StandaloneHerder
from strom.connect.plugins import plugin_list
from strom.connect.rest_security import BasicAuth, BasicAuthMiddleware

VERSION = "0.1.0"


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error_code": status, "message": message}, status_code=status)


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "false").lower() == "true"


async def _body(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw or b"null")
    except ValueError as exc:
        raise RestError(400, f"Cannot deserialize the request body: {exc}") from None


Endpoint = Callable[[Request], Any]


def _forwarding(endpoint: Endpoint) -> Callable[[Request], Awaitable[Response]]:
    """Run ``endpoint`` (in the thread pool if sync); forward it if the herder says so."""
    is_async = inspect.iscoroutinefunction(endpoint)

    async def wrapper(request: Request) -> Response:
        body = await request.body()  # cached on the request for the endpoint too
        try:
            if is_async:
                return await endpoint(request)  # type: ignore[no-any-return]
            return await run_in_threadpool(endpoint, request)  # type: ignore[no-any-return]
        except ForwardRequest as exc:
            status, raw = await run_in_threadpool(
                forward, exc, request.method, request.url.path,
                list(request.query_params.multi_items()), body,
                authorization=request.headers.get("authorization"))
            return Response(raw, status_code=status, media_type="application/json")

    return wrapper


def build_app(herder: StandaloneHerder, cluster_id: Callable[[], str | None],
              basic_auth: BasicAuth | None = None) -> Starlette:
    """The REST API of ``herder``; with ``basic_auth`` every request but the internal ones
    needs credentials (:class:`~strom.connect.rest_security.BasicAuthMiddleware`)."""
    h = herder

    def root(request: Request) -> Response:
        return JSONResponse({"version": VERSION, "commit": "strom",
                             "kafka_cluster_id": cluster_id()})

    async def connectors(request: Request) -> Response:
        if request.method == "POST":
            body = await _body(request)
            if not isinstance(body, dict) or not isinstance(body.get("config"), dict):
                raise RestError(400, "Request body must contain a \"config\" object")
            name = body.get("name") or body["config"].get("name")
            if not name or not str(name).strip():
                raise RestError(400, "Connector name must not be empty")
            _, info = await run_in_threadpool(h.put_config, str(name), body["config"],
                                              allow_replace=False)
            return JSONResponse(info, status_code=201,
                                headers={"Location": f"/connectors/{name}"})
        expand = request.query_params.getlist("expand")
        names = await run_in_threadpool(h.names)
        if not expand:
            return JSONResponse(names)
        out: dict[str, Any] = {}
        for n in names:
            entry: dict[str, Any] = {}
            try:
                if "status" in expand:
                    entry["status"] = h.status(n)
                if "info" in expand:
                    entry["info"] = h.info(n)
            except RestError as exc:
                if exc.status != 404:
                    raise
                continue  # deleted meanwhile, or no status yet: left out, as Kafka does
            out[n] = entry
        return JSONResponse(out)

    def connector(request: Request) -> Response:
        name = request.path_params["name"]
        if request.method == "DELETE":
            h.delete(name)
            return Response(status_code=204)
        return JSONResponse(h.info(name))

    async def config(request: Request) -> Response:
        name = request.path_params["name"]
        if request.method == "PUT":
            body = await _body(request)
            if not isinstance(body, dict):
                raise RestError(400, "Request body must be a JSON object of configs")
            created, info = await run_in_threadpool(h.put_config, name, body,
                                                    allow_replace=True)
            return JSONResponse(info, status_code=201 if created else 200)
        return JSONResponse(h.config(name))

    def status(request: Request) -> Response:
        return JSONResponse(h.status(request.path_params["name"]))

    def tasks(request: Request) -> Response:
        return JSONResponse(h.tasks(request.path_params["name"]))

    def task_status(request: Request) -> Response:
        return JSONResponse(h.task_status(request.path_params["name"],
                                          request.path_params["task"]))

    def restart(request: Request) -> Response:
        name = request.path_params["name"]
        include, only = _flag(request, "includeTasks"), _flag(request, "onlyFailed")
        h.restart(name, include, only)
        if not include and not only:
            return Response(status_code=204)
        return JSONResponse(h.status(name), status_code=202)

    def task_restart(request: Request) -> Response:
        h.restart_task(request.path_params["name"], request.path_params["task"])
        return Response(status_code=204)

    def pause(request: Request) -> Response:
        h.pause(request.path_params["name"])
        return Response(status_code=202)

    def resume(request: Request) -> Response:
        h.resume(request.path_params["name"])
        return Response(status_code=202)

    def stop(request: Request) -> Response:
        h.stop(request.path_params["name"])
        return Response(status_code=204)

    async def offsets(request: Request) -> Response:
        name = request.path_params["name"]
        body = await _body(request) if request.method == "PATCH" else None
        result = await run_in_threadpool(h.connector_offsets, name, request.method, body)
        return JSONResponse(result)

    async def task_configs(request: Request) -> Response:
        """Internal (worker to leader): a connector's new task configs, a JSON list."""
        body = await _body(request)
        put = getattr(h, "put_task_configs", None)
        if put is None:
            raise RestError(500, "Kafka Connect in standalone mode does not support externally "
                                 "setting task configurations.")
        await run_in_threadpool(put, request.path_params["name"], body)
        return Response(status_code=204)

    def fence(request: Request) -> Response:
        """Internal (worker to leader): fence a connector's zombie tasks (KIP-618)."""
        fence_zombies = getattr(h, "fence", None)
        if fence_zombies is None:
            raise RestError(400, "Exactly-once source support is not enabled on this worker")
        fence_zombies(request.path_params["name"])
        return Response(status_code=204)

    def plugins(request: Request) -> Response:
        only = request.query_params.get("connectorsOnly", "true").lower() != "false"
        return JSONResponse(plugin_list(connectors_only=only))

    async def validate(request: Request) -> Response:
        plugin = request.path_params["plugin"]
        body = await _body(request)
        if not isinstance(body, dict):
            raise RestError(400, "Request body must be a JSON object of configs")
        body = {str(k): str(v) for k, v in body.items()}
        given = body.get("connector.class")
        if given and given != plugin and not given.endswith("." + plugin) and \
                not given.endswith("." + plugin + "Connector"):
            raise RestError(400, f"Included connector type {given} does not match request "
                                 f"type {plugin}")
        body.setdefault("connector.class", plugin)
        return JSONResponse(h.validate(body))

    async def rest_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RestError)
        return _error(exc.status, exc.message)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return _error(exc.status_code, str(exc.detail))

    async def internal_error(request: Request, exc: Exception) -> Response:
        return _error(500, f"{type(exc).__name__}: {exc}")

    n = "/connectors/{name}"
    routes = [
        Route("/", root, methods=["GET"]),
        Route("/connectors", connectors, methods=["GET", "POST"]),
        Route(n, connector, methods=["GET", "DELETE"]),
        Route(n + "/config", config, methods=["GET", "PUT"]),
        Route(n + "/status", status, methods=["GET"]),
        Route(n + "/tasks", tasks, methods=["GET"]),
        Route(n + "/tasks", task_configs, methods=["POST"]),
        Route(n + "/tasks/{task:int}/status", task_status, methods=["GET"]),
        Route(n + "/restart", restart, methods=["POST"]),
        Route(n + "/tasks/{task:int}/restart", task_restart, methods=["POST"]),
        Route(n + "/pause", pause, methods=["PUT"]),
        Route(n + "/resume", resume, methods=["PUT"]),
        Route(n + "/stop", stop, methods=["PUT"]),
        Route(n + "/fence", fence, methods=["PUT"]),
        Route(n + "/offsets", offsets, methods=["GET", "PATCH", "DELETE"]),
        Route("/connector-plugins", plugins, methods=["GET"]),
        Route("/connector-plugins/{plugin}/config/validate", validate, methods=["PUT"]),
    ]
    routes = [Route(r.path, _forwarding(r.endpoint), methods=sorted(r.methods or ()))
              for r in routes]
    app = Starlette(routes=routes, exception_handlers={
        RestError: rest_error, HTTPException: http_error, Exception: internal_error})
    if basic_auth is not None:
        app.add_middleware(BasicAuthMiddleware, auth=basic_auth)
    return app
