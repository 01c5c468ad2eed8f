DROP TABLE topups;
DROP TABLE stripe_events;
