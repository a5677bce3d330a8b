-- A registration bot for wrk: every request registers a new made-up userId,
-- from one client address (X-Forwarded-For, as a trusted balancer would
-- write it), as fast as the connections allow. scripts/bot.sh runs it
-- against waitgate with and without each defence.
--
--   wrk -t1 -c16 -d20s -s examples/bot/register-flood.lua http://127.0.0.1:8080
--
-- BOT_ADDRESS (default 10.6.6.6) is the address the bot comes from.

local counter = 0
local thread_id = 0
local threads = {}

function setup(thread)
  thread:set("id", thread_id)
  thread_id = thread_id + 1
  table.insert(threads, thread)
end

function init(args)
  address = os.getenv("BOT_ADDRESS") or "10.6.6.6"
  statuses = {}
end

function request()
  counter = counter + 1
  local body = string.format('{"userId":"bot-%d-%d"}', id, counter)
  return wrk.format("POST", "/api/v1/queue/register", {
    ["Content-Type"] = "application/json",
    ["X-Forwarded-For"] = address,
  }, body)
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local totals = {}
  for _, thread in ipairs(threads) do
    local seen = thread:get("statuses")
    for status, n in pairs(seen) do
      totals[status] = (totals[status] or 0) + n
    end
  end
  for status, n in pairs(totals) do
    io.write(string.format("bot status %d: %d\n", status, n))
  end
end
