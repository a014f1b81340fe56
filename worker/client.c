/* placeholder */ typedef int flps_client_placeholder_;
