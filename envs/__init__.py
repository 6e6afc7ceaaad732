"""roost.envs: environments behind one async protocol, served over HTTP.

- `protocol`: the `Env` protocol and its records (actions, observations, steps, tasks).
- `errors`: the error classes, shared by server and client.
- `registry`: env names → entry points; `make_env` builds one in this process.
- `wire`, `http_app`, `episodes`, `worker`, `serve`: the HTTP env server (its wire types, its
  FastAPI app, episodes and leases, worker processes that run env code, and running it).
- `client`: the async HTTP client (`EnvClient`) and `RemoteEnv`.
- `gym_wrapper`: `GymEnv`, a `gymnasium.Env` over any env.
- `containers`: building and running an env's image (`roost serve ENV --docker`).
- one subpackage per env (`alfworld`, ...), each with its Dockerfile.

Importing this package imports nothing heavy; env code loads when an env is made.
Where it sits and its server contract: docs/architecture.md.
"""
