-- No KEYS, no ARGV. Loops until SCRIPT KILL ends it; it writes nothing,
-- so SCRIPT KILL can end it at any time.
while true do end
