-- Argo CD health of an odradek.io KafkaCluster, Topic or KafkaUser, from the conditions the
-- operator writes. One script for the three kinds: a KafkaCluster's problem condition is
-- Degraded (it writes one at every pass), a Topic's and a KafkaUser's is Stalled (they write no
-- Degraded); only a Topic's Ready has reason Unmanaged.
local hs = {status = "Progressing", message = "Waiting for the operator"}
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
if obj.metadata.generation ~= nil and obj.status.observedGeneration ~= obj.metadata.generation then
  hs.message = "Waiting for the operator to look at generation " .. tostring(obj.metadata.generation)
  return hs
end
local ready, degraded, stalled
for _, c in ipairs(obj.status.conditions) do
  if c.type == "Ready" then ready = c end
  if c.type == "Degraded" then degraded = c end
  if c.type == "Stalled" then stalled = c end
end
local problem = degraded or stalled
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message or ""
elseif ready ~= nil and ready.reason == "Unmanaged" then
  hs.status = "Suspended"
  hs.message = ready.message or ""
elseif problem ~= nil and problem.status == "True" then
  hs.status = "Degraded"
  hs.message = tostring(problem.reason) .. ": " .. (problem.message or "")
elseif ready ~= nil then
  hs.message = tostring(ready.reason) .. ": " .. (ready.message or "")
end
return hs
