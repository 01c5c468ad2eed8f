DROP FUNCTION IF EXISTS checkout_state(text, text, text, text);
