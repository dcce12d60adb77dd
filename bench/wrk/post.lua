-- POSTs one file to every request: wrk -s bench/wrk/post.lua, with BENCH_BODY (the file)
-- and BENCH_CONTENT_TYPE in the environment. bench/harness runs it.
local f = assert(io.open(os.getenv("BENCH_BODY"), "rb"))
wrk.body = f:read("*a")
f:close()
wrk.method = "POST"
wrk.headers["Content-Type"] = os.getenv("BENCH_CONTENT_TYPE") or "application/octet-stream"
