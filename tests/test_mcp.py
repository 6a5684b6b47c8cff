"""`python -m playground --mcp`: the public API's events as MCP tools through Gradio's own MCP server,
listed by its schema route and called with the `mcp` package's client over the streamable HTTP transport."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from support.hostile import Server

from playground.__main__ import parse_args
from playground.app import launch_kwargs
from playground.settings import Settings

pytestmark = pytest.mark.integration
MAIN_TOOLS = {"train", "stop", "generate", "attention"}
ANALYSIS_TOOLS = {"head_steps", "ablate", "head_importance", "logit_lens", "logit_attribution", "patch", "circuits"}
PRIVATE = {"free_session", "mark_browser", "come_back", "preview", "describe_setup", "share_setup", "stopped"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("mcp-store"), "--mcp")
    yield server
    server.kill()


def test_mcp_is_off_unless_asked():
    assert parse_args([]).mcp is False and parse_args(["--mcp"]).mcp is True
    assert launch_kwargs(Settings.from_env({}))["mcp_server"] is False  # not $GRADIO_MCP_SERVER's to decide


def test_the_tools_are_the_public_events_by_their_api_names(server):
    tools = {tool["name"]: tool for tool in httpx.get(f"{server.url}gradio_api/mcp/schema", timeout=30).json()}
    public = {name.lstrip("/") for name in httpx.get(f"{server.url}gradio_api/info", timeout=30).json()["named_endpoints"]}
    assert tools.keys() == public  # the API page's list, nothing more
    assert MAIN_TOOLS | ANALYSIS_TOOLS | {"baby_gpt_train", "ladder"} <= tools.keys()
    assert not PRIVATE & tools.keys() and not [name for name in tools if name.startswith(("js_fn", "unnamed"))]
    for name in MAIN_TOOLS:  # each says what it does and what it returns
        assert "Returns:" in tools[name]["description"] and len(tools[name]["description"]) > 80, tools[name]
    assert "prompt" in tools["generate"]["inputSchema"]["properties"]


def test_an_mcp_client_trains_and_generates(server):
    async def session_calls() -> tuple[list[str], str, str]:
        async with streamable_http_client(f"{server.url}gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                listed = [tool.name for tool in (await session.list_tools()).tools]
                trained = await session.call_tool("train", {})  # the default form: the copy task, 250 steps
                generated = await session.call_tool("generate", {"prompt": "qwhzbkad|", "max_new_tokens": 9,
                                                                 "temperature": 0})
                assert not trained.isError and not generated.isError
                return listed, trained.content[0].text, generated.content[0].text

    with ThreadPoolExecutor(1) as thread:  # a loop of its own: Playwright's may be running in this thread
        listed, trained, generated = thread.submit(asyncio.run, session_calls()).result()
    assert MAIN_TOOLS <= set(listed) and "free_session" not in listed
    assert "Done: 250 steps" in trained, trained[:300]
    assert "qwhzbkad|qwhzbkad" in generated, generated[:500]  # the copy task learned, read back over MCP
