"""RQ job functions and the services they wrap. Workers never open the database."""
