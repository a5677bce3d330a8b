-- Shared by the scripts that check a credential: waitgate prepends this file
-- to dropout.lua and token.lua when it loads them (see src/store/mod.rs).

-- Compares two digests in full whatever the first difference, so the time
-- taken does not tell how much of a guess was right. Digests, not the
-- credentials, are compared, so even a timing leak says nothing about the
-- credential itself.
local function same_digest(stored, presented)
  local diff = 0
  if #stored ~= #presented then
    diff = 1
  end
  for i = 1, #presented do
    diff = bit.bor(diff, bit.bxor(string.byte(presented, i), string.byte(stored, i) or 0))
  end
  return diff == 0
end
