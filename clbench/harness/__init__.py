"""Any agent harness on clbench: tasks served over MCP, and external commands driven per instance.

- clbench.harness.bridge: the hand-off between MCP tool calls and the runner's agent;
- clbench.harness.server: the MCP server (the `mcp` SDK) over streamable HTTP or stdio;
- clbench.harness.agents: `mcp` (`clbench serve`) and `command` (`--agent command`) agents;
- clbench.harness.scripted_client: a real MCP client that plays a scripted agent (tests, example).
"""
