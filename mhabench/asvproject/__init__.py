"""asv glue: a copy of the project's asv config with results of its own (:mod:`.asv_config`),
the suite's cells as asv's discovery lists them (:mod:`.cells`), asv's results files read
(:mod:`.result_files`), the published site served offline (:mod:`.asv_site`) and a user's
own repository made an asv project (:mod:`.own_repo`, ``mhabench init``)."""
