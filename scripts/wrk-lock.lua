-- wrk script: the lock op of kahuna-bench over REST, for measuring a node's
-- REST path with a client that costs little (wrk is C). Each connection
-- alternates a try-lock of a random key of 10,000 and its try-unlock.
--
--   wrk -t2 -c64 -d5s -s scripts/wrk-lock.lua http://127.0.0.1:2070
--
-- Headers given with -H are sent too (e.g. -H 'TE: trailers', which kahuna's
-- REST fast path leaves to net/http).
--
-- Every request is counted by wrk; a lock op is two of them.
local counter = 0
local key = 0
local owner = "b3duZXItMQ==" -- base64 of "owner-1"; one owner per wrk run

request = function()
  counter = counter + 1
  local path
  if counter % 2 == 1 then
    key = math.random(0, 9999)
    path = "/v1/locks/try-lock"
  else
    path = "/v1/locks/try-unlock"
  end
  local body = '{"resource":"bench:' .. key .. '","owner":"' .. owner .. '","expiresMs":5000,"durability":0}'
  -- wrk.format sends only the headers it is given: add those of -H.
  local headers = {["Content-Type"] = "application/json"}
  for name, value in pairs(wrk.headers) do
    headers[name] = value
  end
  return wrk.format("POST", path, headers, body)
end
