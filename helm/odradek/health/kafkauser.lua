-- Argo CD health of an odradek.io KafkaUser, from the conditions the operator writes.
local hs = {status = "Progressing", message = "Waiting for the operator"}
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
if obj.metadata.generation ~= nil and obj.status.observedGeneration ~= obj.metadata.generation then
  hs.message = "Waiting for the operator to look at generation " .. tostring(obj.metadata.generation)
  return hs
end
local ready, stalled
for _, c in ipairs(obj.status.conditions) do
  if c.type == "Ready" then ready = c end
  if c.type == "Stalled" then stalled = c end
end
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message or ""
elseif stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = tostring(stalled.reason) .. ": " .. (stalled.message or "")
elseif ready ~= nil then
  hs.message = tostring(ready.reason) .. ": " .. (ready.message or "")
end
return hs
